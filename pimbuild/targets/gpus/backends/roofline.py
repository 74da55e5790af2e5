"""Backend ``roofline``: the spec sheet's roofline (``pimbuild.targets.gpus.costmodel.roofline``),
the baseline the fit replaces."""

from __future__ import annotations

from typing import Any

from pimbuild.targets.gpus.costmodel import roofline


def settings(cfg: Any, target: Any) -> dict[str, Any]:
    return {}


def roofline_times(graph: Any, target: Any) -> list[list[float]]:
    return [[roofline.kernel_time(k, d, target) for d in target.devices] for k in graph.kernels]


def times(data: dict[str, Any], graph: Any, p: Any) -> tuple[list[list[float]], dict[str, Any]]:
    return roofline_times(graph, p.target), {"measured": []}
