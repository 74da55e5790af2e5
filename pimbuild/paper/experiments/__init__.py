"""Shipped experiments: ``pimbuild +experiment=<name>`` builds every point of one of the paper's
tables or figures and writes one combined table and plot beside the paper's values.

An experiment is a config (``pimbuild/conf/experiment/<name>.yaml``: ``experiment.name`` and
``experiment.points``, each point a list of overrides) plus a module of this package named like
it, with ``rows(results, cfg) -> list[dict]`` (one row per line of the combined table, the
paper's value beside ours; ``results[point]`` holds the point's ``report`` and its ``stages``
directories), ``summary(rows) -> list[str]`` and ``plot(rows, path)``. Every point
is one ordinary build with the run's own overrides plus the point's, in one artifact store, so
a rerun reuses everything and a reviewer can rebuild any point alone. Output, in the run
directory: ``<point>/`` (each build's manifest), ``experiment.{json,md,png}``.
``experiment.only=[a,b]`` builds only those points.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pimbuild.build.driver import build
from pimbuild.core.console import console
from pimbuild.core.errors import ConfigError
from pimbuild.core.registry import Registry

EXPERIMENTS = Registry("experiment", "experiment.name", package="pimbuild.paper.experiments")


def point_overrides(run_overrides: list[str], point: list[str]) -> list[str]:
    """The run's overrides without the experiment's own, then the point's. A run override of a
    key the point sets is refused: the experiment chooses it."""
    keys = {o.split("=", 1)[0].lstrip("+~") for o in point}
    base = [o for o in run_overrides if not o.lstrip("+~").startswith("experiment")]
    clash = [o for o in base if o.split("=", 1)[0].lstrip("+~") in keys]
    if clash:
        raise ConfigError(f"{' '.join(clash)}: the experiment sets this for every point; "
                          "drop it (or copy the experiment config and edit its points)")
    return [*base, *point]


def run(cfg: DictConfig, run_overrides: list[str], out_dir: Path) -> list[dict[str, Any]]:
    """Build every point (``hydra.compose`` with the point's overrides) and write the table."""
    from hydra import compose

    spec = cfg.experiment
    module = EXPERIMENTS.get(spec.name)
    if "simulate" not in cfg.stages:
        raise ConfigError(f"stages=[{','.join(cfg.stages)}]: an experiment builds every point "
                          f"through simulate (its tables read the reports); drop stages=")
    points = dict(spec.points)
    only = list(spec.get("only") or [])
    unknown = [name for name in only if name not in points]
    if unknown:
        raise ConfigError(f"experiment.only: no point {', '.join(unknown)} in experiment "
                          f"{spec.name} (points: {', '.join(points)})")
    points = {name: point for name, point in points.items() if not only or name in only}
    composed = {name: compose("config", overrides=[
        *point_overrides(run_overrides, list(point)), "show_candidates=false"])
        for name, point in points.items()}  # every point composes before anything builds
    results: dict[str, dict[str, Any]] = {}
    for i, (name, sub) in enumerate(composed.items(), 1):
        start = time.perf_counter()
        console.quiet = True
        try:
            result = build(sub, out_dir / name)
        finally:
            console.quiet = False
        stages = {s: Path(v["dir"]) for s, v in result.manifest["stages"].items()}
        results[name] = {"stages": stages,
                         "report": json.loads((stages["simulate"] / "report.json").read_text())}
        built = ",".join(result.executed) or "nothing (all cached)"
        console.print(f"[{i}/{len(composed)}] {name}: {time.perf_counter() - start:.1f} s, "
                      f"built {built}")
    rows = module.rows(results, cfg)
    write(rows, module.summary(rows), out_dir, spec.name)
    module.plot(rows, out_dir / "experiment.png")
    console.print(f"experiment {spec.name}: {out_dir / 'experiment.md'}")
    return rows


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.3f}"
    return "" if v is None else str(v)


def write(rows: list[dict[str, Any]], summary: list[str], out_dir: Path, name: str) -> None:
    from rich.table import Table

    (out_dir / "experiment.json").write_text(json.dumps(
        {"experiment": name, "rows": rows, "summary": summary}, indent=2) + "\n")
    header = list(dict.fromkeys(k for r in rows for k in r))
    table = Table(title=f"experiment {name}", title_justify="left")
    for col in header:
        table.add_column(col, justify="left" if col in ("model", "half", "point") else "right")
    md = [f"# experiment {name}", "", "| " + " | ".join(header) + " |",
          "|" + "---|" * len(header)]
    for r in rows:
        cells = [_cell(r.get(c)) for c in header]
        table.add_row(*cells)
        md.append("| " + " | ".join(cells) + " |")
    md += ["", *summary]
    (out_dir / "experiment.md").write_text("\n".join(md) + "\n")
    console.print(table)
    for line in summary:
        console.print(line)
