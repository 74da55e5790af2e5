"""A copy model of one's own with one typed option (tests/test_plugin_options.py): eq. 8's
bytes times ``sim.copy_model_options.factor`` (a link that moves each byte ``factor`` times,
say). This file is all it takes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pimbuild.targets.offload.copymodels.upper_bound import copies as eq8


@dataclass(frozen=True)
class Options:
    factor: float = field(default=1.0, metadata={"range": (">", 0)})


def copies(nests: list[Any], offloaded: set[int], outputs: set[str],
           options: Options = Options()) -> tuple[int, int]:
    fetch, flush = eq8(nests, offloaded, outputs)
    return round(fetch * options.factor), round(flush * options.factor)
