"""Backend ``auto`` (the default): measured where the shipped data hold the kernel
(``pimbuild.targets.gpus.kerneltime.grid``: public measurements of the catalogue's GPUs under
vLLM, looked up by the device's ``measured_as``), interpolated between measured neighbours
where they are close enough, and the fitted model's prediction elsewhere; ``profile.json``
says per device how many kernels, and what share of the time, were measured, interpolated
and predicted."""

from __future__ import annotations

from typing import Any

from pimbuild.targets.gpus.backends import fitted, kernel_ops, share
from pimbuild.targets.gpus.kerneltime import grid, model, sources

_GRIDS: dict[str, dict[str, grid.Grid]] = {}


def settings(cfg: Any, target: Any) -> dict[str, Any]:
    return {**fitted.settings(cfg, target),
            "grid": f"{sources.ENGINE}@{model.digest(sources.ENGINE)}"}


def grids(path_at: str, names: set[str]) -> dict[str, grid.Grid]:
    """The measured grids of the GPUs called ``names`` in the shipped data (cached)."""
    key = f"{path_at}|{','.join(sorted(names))}"
    if key not in _GRIDS:
        _GRIDS[key] = grid.load(sorted(names), path_at.rpartition("@")[0])
    return _GRIDS[key]


def grid_times(data: dict[str, Any], p: Any, t: list[list[float]]
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


def times(data: dict[str, Any], graph: Any, p: Any) -> tuple[list[list[float]], dict[str, Any]]:
    t, measured = fitted.times(data, graph, p)
    t, info = grid_times(data, p, t)
    return t, {**measured, **info, "measured": [k for k, v in info["sources"].items()
                                                if v["measured"] or v["interpolated"]]}
