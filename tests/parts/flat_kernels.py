"""A kernel-time backend of one's own with one typed option (tests/test_plugin_options.py):
every kernel takes ``gpus.backend_options.us`` microseconds on every device. This file is
all it takes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Options:
    us: float = field(default=1.0, metadata={"range": (">", 0)})


def settings(cfg: Any, target: Any) -> dict[str, Any]:
    return {}


def times(data: dict[str, Any], graph: Any, p: Any) -> tuple[list[list[float]], dict[str, Any]]:
    seconds = p.options.us * 1e-6
    return [[seconds] * len(p.target.devices) for _ in graph.kernels], {"measured": []}
