"""Backend ``cuda``: kernels timed on this machine's GPU (``pimbuild.targets.gpus.program.cuda``),
the roofline's estimate for what it does not measure; refused with a clear error where
``torch.cuda.is_available()`` is false."""

from __future__ import annotations

from typing import Any

from pimbuild.core.errors import ConfigError
from pimbuild.frontend.lower import model_params
from pimbuild.targets.gpus.backends.roofline import roofline_times
from pimbuild.targets.gpus.program import cuda


def settings(cfg: Any, target: Any) -> dict[str, Any]:
    if cfg.gpus.kernels != "lowered":
        raise ConfigError("gpus.backend=cuda times the lowered kernels node by node: add "
                          "gpus.kernels=lowered")
    return {"model": model_params(cfg)}  # it runs the recipe


def times(data: dict[str, Any], graph: Any, p: Any) -> tuple[list[list[float]], dict[str, Any]]:
    return cuda.kernel_times(graph, p.target, p.model, roofline_times(graph, p.target))
