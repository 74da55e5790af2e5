"""Backend ``table``: measured times from kernel-time tables (``gpus.tables``, made on other
machines by ``pimbuild-kernels export``); a kernel no table has comes from the fitted model,
and ``profile.json`` says per device how many kernels, and what share of the time, were
measured."""

from __future__ import annotations

from typing import Any

from pimbuild.core.errors import ConfigError
from pimbuild.targets.gpus.backends import fitted, share
from pimbuild.targets.gpus.kerneltime import model, tables


def settings(cfg: Any, target: Any) -> dict[str, Any]:
    from hydra.utils import to_absolute_path

    fit = fitted.settings(cfg, target)
    if not cfg.gpus.tables:
        raise ConfigError("gpus.backend=table needs gpus.tables=[FILE,...] "
                          "(`pimbuild-kernels export` writes them)")
    paths = [to_absolute_path(t) for t in cfg.gpus.tables]
    names = sorted({d.name for d in target.devices})
    for t in paths:  # missing, invalid or foreign: one error line, before any stage
        device = tables.load(t)["device"]
        if device not in names:
            raise ConfigError(f"kernel-time table {t} measures '{device}', which no "
                              f"device of devices= is (they are {', '.join(names)})")
    return {**fit, "tables": tuple(f"{t}@{model.digest(t)}" for t in paths)}


def table_times(data: dict[str, Any], p: Any, t: list[list[float]]
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


def times(data: dict[str, Any], graph: Any, p: Any) -> tuple[list[list[float]], dict[str, Any]]:
    t, measured = fitted.times(data, graph, p)
    t, info = table_times(data, p, t)
    return t, {**measured, **info, "measured": [k for k, v in info["sources"].items()
                                                if v["measured"] or v["interpolated"]]}
