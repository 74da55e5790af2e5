"""Stage ``profile`` of the GPU target: every kernel's time on every device, from the
kernel-time backend ``gpus.backend`` names (``pimbuild.targets.gpus.backends``: ``auto``,
the default, measured where the shipped data hold the kernel and the fit elsewhere;
``roofline``; ``fitted``; ``table``; ``cuda``; or one's own).

Writes ``kernel_times.csv`` (one row per kernel, a time column per device) and
``profile.json`` with FluidGPU's Fig. 2 view: the share of kernels faster on the second
device, by count and by time.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pimbuild.core import schema
from pimbuild.core.errors import ConfigError
from pimbuild.core.stage import Inputs, ModelParams, plain
from pimbuild.targets.gpus.backends import BACKENDS
from pimbuild.targets.gpus.costmodel import ddg, roofline
from pimbuild.targets.gpus.target import GpuTarget

NAME = "profile"
READS = ("extract",)
WRITES = ("kernel_times.csv", "profile.json")


@dataclass(frozen=True)
class Params:
    backend: str
    target: Any  # the GpuTarget
    model: ModelParams | None = None  # the cuda backend runs the recipe; the roofline does not
    kernel_model: str = ""  # the fitted backend's fit: path and content digest (the key)
    tables: tuple[str, ...] = ()  # the table backend's tables: path and content digest
    grid: str = ""  # the auto backend's measured data: path and content digest
    options: Any = None  # the backend's own Options (gpus.backend_options), where it has them


def params(cfg: DictConfig) -> Params:
    if cfg.profile.backend != "auto":
        raise ConfigError(f"profile.backend is the counter backend of the host-and-accelerator "
                          f"targets (system=pim); the GPU target's kernel-time backend is "
                          f"gpus.backend: gpus.backend={cfg.profile.backend}")
    backend = cfg.gpus.backend
    options = BACKENDS.options(backend, plain(cfg.gpus.backend_options))  # unknown: one line
    target = GpuTarget.from_config(cfg)
    if cfg.gpus.tables and backend != "table":
        raise ConfigError(f"gpus.tables is read only by gpus.backend=table (this build's is "
                          f"{backend}): add gpus.backend=table, or leave gpus.tables out")
    settings = BACKENDS.get(backend).settings(cfg, target)
    return Params(backend=backend, target=target, options=options, **settings)


def times(inputs: Inputs, p: Params) -> tuple[Any, list[list[float]]]:
    """The graph (at the served precision) and ``times[k][d]``, from the stored CSV."""
    data = json.loads((inputs["extract"] / "kernels.json").read_text())
    graph = ddg.build(data, data.get("layers", 1), p.target.float_scale)
    with (inputs["profile"] / "kernel_times.csv").open() as f:
        rows = list(csv.DictReader(f))
    keys = [d.key for d in p.target.devices]
    return graph, [[float(r[f"t_{k}_s"]) for k in keys] for r in rows]


def fig2(graph: Any, t: list[list[float]], names: list[str] | None = None) -> dict[str, Any]:
    """Share of kernels faster on the second device than on the first, by count and time;
    the second is the first of another model than the first device's (``names``: 2 A100 +
    1 L40S compare the L40S), else device 1."""
    if not t or len(t[0]) < 2:
        return {}
    names = names or []
    second = next((d for d in range(1, len(t[0])) if d < len(names) and names[d] != names[0]),
                  1)
    faster = [k for k, row in enumerate(t) if row[second] < row[0]]
    total = sum(row[0] for row in t)
    return {"kernels": len(t), "second": second, "faster_on_second": len(faster),
            "share_by_count": len(faster) / len(t),
            "share_by_time": sum(t[k][0] for k in faster) / total if total else 0.0}


def run(inputs: Inputs, p: Params, out: Path) -> None:
    data = json.loads((inputs["extract"] / "kernels.json").read_text())
    graph = ddg.build(data, data.get("layers", 1), p.target.float_scale)
    t, measured = BACKENDS.get(p.backend).times(data, graph, p)
    keys = [d.key for d in p.target.devices]
    schema.seconds(t, "profile's kernel times")
    with (out / "kernel_times.csv").open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["id", "name", "kind", "flops", "bytes", "engine",
                    *(f"t_{k}_s" for k in keys)])
        for k, row in zip(graph.kernels, t, strict=True):
            moved = sum(k.reads.values()) + sum(k.writes.values())
            w.writerow([k.id, k.name, k.kind, k.flops, moved,
                        roofline.engine(k, p.target.precision), *row])
    (out / "profile.json").write_text(json.dumps(
        {"backend": p.backend, "devices": keys, "precision": p.target.precision,
         "device_names": {d.key: d.name for d in p.target.devices}, **measured,
         "fig2": fig2(graph, t, [d.name for d in p.target.devices])}, indent=2) + "\n")
