"""Stage ``profile`` of the GPU target: every kernel's time on every device.

``profile.backend``:

- ``auto`` (the default): measured where the shipped data hold the kernel
  (``pimbuild.targets.gpus.kerneltime.grid``: public measurements of the catalogue's GPUs
  under vLLM, looked up by the device's ``measured_as``), interpolated between measured
  neighbours where they are close enough, and the fitted model's prediction elsewhere;
  ``profile.json`` says per device how many kernels, and what share of the time, were
  measured, interpolated and predicted;
- ``roofline`` (``pimbuild.targets.gpus.roofline``): the spec sheet's roofline, the baseline
  the fit replaces;
- ``fitted`` (``pimbuild.targets.gpus.kerneltime.model``): the
  kernel-time model fitted to measured times (``gpus.kernel_model``: a fit's JSON, null for
  the shipped one), each kernel as the op that stands for it (``ops.from_kernel``);
- ``table`` (``pimbuild.targets.gpus.kerneltime.tables``): measured times from kernel-time tables
  (``gpus.tables``), made on other machines; a kernel no table has comes from the fitted model,
  and ``profile.json`` says per device how many kernels, and what share of the time, were
  measured;
- ``cuda`` (kernels timed on this machine's GPU, ``pimbuild.targets.gpus.cuda``), refused with
  a clear error where ``torch.cuda.is_available()`` is false.

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
from pimbuild.core.stage import Inputs, ModelParams
from pimbuild.frontend.lower import model_params
from pimbuild.targets.gpus import cuda, ddg, roofline
from pimbuild.targets.gpus.kerneltime import grid, model, ops, sources, tables
from pimbuild.targets.gpus.target import GpuTarget

NAME = "profile"
READS = ("extract",)
WRITES = ("kernel_times.csv", "profile.json")
# the kernel-time backends (profile.backend with system=gpus; the PIM target's counter
# backends are a registry, pimbuild.targets.offload.counters.BACKENDS)
KERNEL_TIME_BACKENDS = ("auto", "roofline", "fitted", "table", "cuda")


@dataclass(frozen=True)
class Params:
    backend: str
    target: Any  # the GpuTarget
    model: ModelParams | None  # the cuda backend runs the recipe; the roofline does not
    kernel_model: str = ""  # the fitted backend's fit: path and content digest (the key)
    tables: tuple[str, ...] = ()  # the table backend's tables: path and content digest
    grid: str = ""  # the auto backend's measured data: path and content digest


def params(cfg: DictConfig) -> Params:
    backend = cfg.profile.backend
    if backend not in KERNEL_TIME_BACKENDS:
        raise ConfigError(f"profile.backend '{backend}' is not a kernel-time backend of "
                          f"system=gpus (choices: {', '.join(KERNEL_TIME_BACKENDS)})")
    target = GpuTarget.from_config(cfg)
    if backend == "cuda" and cfg.gpus.kernels != "lowered":
        raise ConfigError("profile.backend=cuda times the lowered kernels node by node: add "
                          "gpus.kernels=lowered")
    if cfg.gpus.tables and backend != "table":
        raise ConfigError(f"gpus.tables is read only by profile.backend=table (this build's is "
                          f"{backend}): add profile.backend=table, or leave gpus.tables out")
    fit, found, grid_file = "", (), ""
    if backend == "auto":
        grid_file = f"{sources.ENGINE}@{model.digest(sources.ENGINE)}"
    if backend in ("auto", "fitted", "table"):
        from hydra.utils import to_absolute_path

        path = to_absolute_path(cfg.gpus.kernel_model) if cfg.gpus.kernel_model \
            else str(model.SHIPPED)
        model.load(path)  # missing or not a fit: one error line, before any stage
        fit = f"{path}@{model.digest(path)}"
        for d in target.devices:
            ops.gpu_of(d)  # a device without the model's spec numbers: one error line
        if backend == "table":
            if not cfg.gpus.tables:
                raise ConfigError("profile.backend=table needs gpus.tables=[FILE,...] "
                                  "(`pimbuild-kernels export` writes them)")
            paths = [to_absolute_path(t) for t in cfg.gpus.tables]
            names = sorted({d.name for d in target.devices})
            for t in paths:  # missing, invalid or foreign: one error line, before any stage
                device = tables.load(t)["device"]
                if device not in names:
                    raise ConfigError(f"kernel-time table {t} measures '{device}', which no "
                                      f"device of devices= is (they are {', '.join(names)})")
            found = tuple(f"{t}@{model.digest(t)}" for t in paths)
    return Params(backend=backend, target=target, kernel_model=fit, tables=found, grid=grid_file,
                  model=model_params(cfg) if backend == "cuda" else None)


def fitted_times(data: dict[str, Any], p: Params
                 ) -> tuple[list[list[float]], dict[str, Any]]:
    """Seconds per kernel and device from the fitted model (``ops.from_kernel``), and the
    fit's held-out error per family (the band its predictions carry)."""
    fitted = model.load(p.kernel_model.rpartition("@")[0])
    found = kernel_ops(data, p.target.precision)
    columns = [fitted.predict(found, [ops.gpu_of(d)] * len(found)) for d in p.target.devices]
    return [[float(c[i]) for c in columns] for i in range(len(found))], \
        fitted.provenance.get("held_out_error", {})


def kernel_ops(data: dict[str, Any], precision: str) -> list[ops.Op]:
    """The op that stands for each kernel of ``kernels.json``: an engine kernel's own
    (``fusion``), else ``ops.from_kernel``'s."""
    floating = {b: info.get("float", False) for b, info in data["buffers"].items()}
    return [ops.Op(dtype=precision, **k["engine_op"]) if k.get("engine_op")
            else ops.from_kernel(k, floating, precision) for k in data["kernels"]]


_GRIDS: dict[str, dict[str, grid.Grid]] = {}


def grids(path_at: str, names: set[str]) -> dict[str, grid.Grid]:
    """The measured grids of the GPUs called ``names`` in the shipped data (cached)."""
    key = f"{path_at}|{','.join(sorted(names))}"
    if key not in _GRIDS:
        _GRIDS[key] = grid.load(sorted(names), path_at.rpartition("@")[0])
    return _GRIDS[key]


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


def grid_times(data: dict[str, Any], p: Params, t: list[list[float]]
               ) -> tuple[list[list[float]], dict[str, Any]]:
    """``t`` with each kernel the shipped data measured (or interpolate) on a device
    replaced by that time; per device, the counts and shares of ``share``."""
    found = kernel_ops(data, p.target.precision)
    names = {d.measured_as for d in p.target.devices if d.measured_as}
    held = grids(p.grid, names) if names else {}
    out = [list(row) for row in t]
    info: dict[str, Any] = {}
    for d, device in enumerate(p.target.devices):
        g = held.get(device.measured_as or "")
        how, raised = [], 0
        for i, o in enumerate(found):
            hit = g.lookup(o) if g else None
            if hit is not None:
                out[i][d] = g.cold(o, hit[0])
                raised += out[i][d] > hit[0]
            how.append(hit[1] if hit else "predicted")
        info[device.key] = {"grid": device.measured_as if g else None,
                            "grid_dtypes": sorted({c[0] for cells in g.times.values()
                                                   for c in cells}) if g else [],
                            "raised_to_dram": raised,
                            "dram_gbps": g.dram_bps / 1e9 if g else 0.0,
                            **share(how, [row[d] for row in out])}
    return out, {"sources": info}


def table_times(data: dict[str, Any], p: Params, t: list[list[float]]
                ) -> tuple[list[list[float]], dict[str, Any]]:
    """``t`` with every kernel a table has measured replaced by its table time; and, per
    device, how many kernels (and what share of the time) were measured or predicted."""
    import torch

    loaded = [tables.load(path.rpartition("@")[0]) for path in p.tables]
    out = [list(row) for row in t]
    found: dict[str, Any] = {}
    for d, device in enumerate(p.target.devices):
        table = tables.for_device(loaded, device.name)
        hits = [table["kernels"].get(tables.key(k, p.target.precision)) if table else None
                for k in data["kernels"]]
        for i, s in enumerate(hits):
            if s is not None:
                out[i][d] = s
        how = ["predicted" if h is None else "measured" for h in hits]
        found[device.key] = {
            "table": bool(table), **share(how, [row[d] for row in out]),
            **({m: table[m] for m in ("gpu", "driver", "torch", "method")} if table else {})}
    return out, {"sources": found,
                 "warnings": tables.versions_differ(loaded, torch.__version__)}


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
    measured: dict[str, Any] = {"measured": []}
    if p.backend in ("auto", "fitted", "table"):
        t, measured["band"] = fitted_times(data, p)
    else:  # the roofline; the cuda backend's estimate for what it does not measure
        t = [[roofline.kernel_time(k, d, p.target) for d in p.target.devices]
             for k in graph.kernels]
    if p.backend in ("auto", "table"):
        t, info = (grid_times if p.backend == "auto" else table_times)(data, p, t)
        measured.update(info, measured=[k for k, v in info["sources"].items()
                                        if v["measured"] or v["interpolated"]])
    if p.backend == "cuda":
        t, measured = cuda.kernel_times(graph, p.target, p.model, t)
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
