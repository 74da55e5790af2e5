"""Backend ``fitted``: the kernel-time model fitted to measured times
(``pimbuild.targets.gpus.kerneltime.model``; ``gpus.kernel_model``: a fit's JSON, null for the
shipped one), each kernel as the op that stands for it (``ops.from_kernel``)."""

from __future__ import annotations

from typing import Any

from pimbuild.targets.gpus.backends import kernel_ops
from pimbuild.targets.gpus.kerneltime import model, ops


def settings(cfg: Any, target: Any) -> dict[str, Any]:
    """The fit (path and content digest: the key), checked before any stage."""
    from hydra.utils import to_absolute_path

    path = to_absolute_path(cfg.gpus.kernel_model) if cfg.gpus.kernel_model \
        else str(model.SHIPPED)
    model.load(path)  # missing or not a fit: one error line, before any stage
    for d in target.devices:
        ops.gpu_of(d)  # a device without the model's spec numbers: one error line
    return {"kernel_model": f"{path}@{model.digest(path)}"}


def predicted(data: dict[str, Any], p: Any) -> tuple[list[list[float]], dict[str, Any]]:
    """Seconds per kernel and device from the fitted model, and the fit's held-out error
    per family (the band its predictions carry)."""
    fitted = model.load(p.kernel_model.rpartition("@")[0])
    found = kernel_ops(data, p.target.precision)
    columns = [fitted.predict(found, [ops.gpu_of(d)] * len(found)) for d in p.target.devices]
    return [[float(c[i]) for c in columns] for i in range(len(found))], \
        fitted.provenance.get("held_out_error", {})


def times(data: dict[str, Any], graph: Any, p: Any) -> tuple[list[list[float]], dict[str, Any]]:
    t, band = predicted(data, p)
    return t, {"measured": [], "band": band}
