"""One build: plan the stage tasks for a config, run them, write the run's manifest and its
page (``report.html``, ``pimbuild.build.page``)."""

from __future__ import annotations

import json
import logging
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf

from pimbuild.build.graph import plan
from pimbuild.build.page import run_page
from pimbuild.build.runner import execute
from pimbuild.core.artifacts import Store, write_manifest
from pimbuild.core.console import cast_line, console, evaluated_line, summary_table
from pimbuild.targets import TARGETS

log = logging.getLogger(__name__)


@dataclass
class BuildResult:
    manifest: dict[str, Any]
    executed: list[str]  # stages whose artifact was produced (built or repaired)
    cached: list[str]  # stages whose artifact was reused
    repaired: dict[str, str]  # stages whose damaged artifact was rebuilt, and why


def build(cfg: DictConfig, run_dir: Path) -> BuildResult:
    """Build ``cfg.stages``; raise a PimbuildError on bad input or a failed stage."""
    store = Store(Path(to_absolute_path(cfg.store)))
    run_dir.mkdir(parents=True, exist_ok=True)
    stage_tasks = plan(cfg, store, failure_dir=run_dir / "failure")
    outcome = execute(stage_tasks, store, console)
    if outcome.error is not None:
        raise outcome.error
    by_name = {t.name: t.stage for t in stage_tasks}
    result = BuildResult(
        manifest=write_manifest(run_dir / "manifest.json", [t.artifact for t in stage_tasks]),
        executed=[by_name[n] for n in outcome.executed],
        cached=[by_name[n] for n in outcome.cached],
        repaired={by_name[n]: why for n, why in outcome.repaired.items()})
    (run_dir / "build.json").write_text(json.dumps(
        {"executed": result.executed, "cached": result.cached, "repaired": result.repaired,
         "seconds": {by_name[n]: s for n, s in outcome.seconds.items()},
         "machine": socket.gethostname(), "pid": os.getpid()}, indent=2) + "\n")
    _summarize(cfg, stage_tasks, result, run_dir)
    return result


def _summarize(cfg: DictConfig, stage_tasks: list, result: BuildResult, run_dir: Path) -> None:
    """The run's closing lines: lower's notes on the model, the target's summary
    (``Target.summarize``), the report's path, the stage table and the manifest's path."""
    def status(stage: str) -> str:
        if stage in result.repaired:
            return "repaired"
        return "built" if stage in result.executed else "up to date"

    rows = [(t.stage, t.artifact.key, status(t.stage), str(t.artifact.dir)) for t in stage_tasks]
    dirs = {stage: Path(v["dir"]) for stage, v in result.manifest["stages"].items()}
    if "lower" in dirs:
        sig = json.loads((dirs["lower"] / "signature.json").read_text())
        if sig.get("cast"):
            console.print(cast_line(cfg.model.name, sig["cast"], cfg.model.dtype),
                          soft_wrap=True, markup=False)
        if sig.get("evaluated"):
            console.print(evaluated_line(cfg.model.name, sig["evaluated"]),
                          soft_wrap=True, markup=False)
    lines = TARGETS.get(cfg.system.name).summarize(cfg, dirs, console.width)
    for line in lines:
        console.print(line, soft_wrap=True)
    if "simulate" in dirs:
        console.print(f"report: {dirs['simulate'] / 'report.md'}")
    elif cfg.timeline:
        console.print(f"timeline=true: no timeline.json, as the simulate stage that writes it "
                      f"is not among this run's stages (stages={list(cfg.stages)})",
                      soft_wrap=True)
    (run_dir / "report.html").write_text(run_page(
        f"pimbuild: model={cfg.model.name}, system={cfg.system.name}", lines, result.manifest,
        OmegaConf.to_yaml(cfg), dirs))
    console.print(summary_table(rows, f"pimbuild: model={cfg.model.name}, "
                                      f"{len(result.executed)} stage(s) built, "
                                      f"{len(result.cached)} up to date"))
    console.print(f"manifest: {run_dir / 'manifest.json'}; page: {run_dir / 'report.html'}")
    log.info("built %s, up to date %s", result.executed, result.cached)
