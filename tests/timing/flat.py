"""A PIM timing model of one's own with one typed option (tests/test_plugin_options.py): every
element costs the same, ``pim.model_options.ns_per_element``, over the busy cores, plus the
fixed costs the offload rule counts. This file is all it takes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Options:
    ns_per_element: float = field(default=1.0, metadata={"range": (">", 0)})


def invocation_time(t: Any, nest: Any, n_iter: float, n_total: float) -> float:
    cores = t.costs.busy_cores(n_iter)
    return t.costs.overhead_s(n_iter) + n_total * t.model_options.ns_per_element * 1e-9 / cores
