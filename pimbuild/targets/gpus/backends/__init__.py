"""Kernel-time backends of the GPU target (``gpus.backend``): where the profile stage's time of
every kernel on every device comes from.

A backend is a module of this package (or ``package.module`` from outside) with

- ``settings(cfg, target) -> dict``: what it adds to the profile stage's ``Params`` (the
  files it reads, with their digests, so that they enter the key), after checking them: a
  bad file or option is one error line before any stage runs;
- ``times(data, graph, p) -> (t, measured)``: ``t[k][d]``, seconds of kernel ``k`` on device
  ``d``, and what ``profile.json`` records of where they came from;
- optionally a dataclass ``Options``: its own options, from ``gpus.backend_options`` (checked
  like a config group), read as ``p.options``.

Built in: ``auto`` (measured where the shipped data hold the kernel, the fit elsewhere),
``roofline``, ``fitted``, ``table`` and ``cuda``. What several share is here: the op that
stands for each kernel and the measured/predicted shares.
"""

from __future__ import annotations

from typing import Any

from pimbuild.core.registry import Registry
from pimbuild.targets.gpus.kerneltime import ops

BACKENDS = Registry("kernel-time backend", "gpus.backend",
                    package="pimbuild.targets.gpus.backends", options="gpus.backend_options")


def kernel_ops(data: dict[str, Any], precision: str) -> list[ops.Op]:
    """The op that stands for each kernel of ``kernels.json``: an engine kernel's own
    (``fusion``), else ``ops.from_kernel``'s."""
    floating = {b: info.get("float", False) for b, info in data["buffers"].items()}
    return [ops.Op(dtype=precision, **k["engine_op"]) if k.get("engine_op")
            else ops.from_kernel(k, floating, precision) for k in data["kernels"]]


def share(how: list[str], column: list[float]) -> dict[str, Any]:
    """How many kernels were measured, interpolated and predicted, the share of the time
    each covers, and the ids of the measured and interpolated ones."""
    total = sum(column) or 1.0
    out: dict[str, Any] = {}
    for kind in ("measured", "interpolated", "predicted"):
        ids = [i for i, h in enumerate(how) if h == kind]
        out[kind] = len(ids)
        out[f"{kind}_time_share"] = sum(column[i] for i in ids) / total
        if kind != "predicted":
            out[f"{kind}_ids"] = ids
    return out
