"""One build: plan the stage tasks for a config, run them, write the run's manifest."""

from __future__ import annotations

import csv
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.utils import to_absolute_path
from omegaconf import DictConfig

from pimbuild.artifacts import Store, write_manifest
from pimbuild.console import (
    candidates_table,
    cast_line,
    console,
    evaluated_line,
    report_lines,
    summary_table,
)
from pimbuild.decide import policy_params
from pimbuild.tasks import plan
from pimbuild.tasks.runner import execute

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
         "seconds": {by_name[n]: s for n, s in outcome.seconds.items()}}, indent=2) + "\n")
    _summarize(cfg, stage_tasks, result, run_dir)
    return result


def _profile_rows(profile_dir: Path) -> dict[int, dict]:
    """timing.csv and counters.csv merged, by nest id."""
    rows: dict[int, dict] = {}
    for name in ("timing.csv", "counters.csv"):
        with (profile_dir / name).open() as f:
            for row in csv.DictReader(f):
                rows.setdefault(int(row["id"]), {}).update(row)
    return rows


def _summarize(cfg: DictConfig, stage_tasks: list, result: BuildResult, run_dir: Path) -> None:
    def status(stage: str) -> str:
        if stage in result.repaired:
            return "repaired"
        return "built" if stage in result.executed else "up to date"

    rows = [(t.stage, t.artifact.key, status(t.stage), str(t.artifact.dir)) for t in stage_tasks]
    stages = result.manifest["stages"]
    def has(stage: str, name: str) -> bool:  # the targets write different files per stage
        return stage in stages and (Path(stages[stage]["dir"]) / name).is_file()

    profiled = _profile_rows(Path(stages["profile"]["dir"])) if has("profile", "timing.csv") \
        else None
    decided = None
    if has("decide", "decisions.json"):
        decisions = json.loads((Path(stages["decide"]["dir"]) / "decisions.json").read_text())
        decided = {d["id"]: d for d in decisions["decisions"]}
    if cfg.show_candidates and has("extract", "candidates.json"):
        candidates = json.loads((Path(stages["extract"]["dir"]) / "candidates.json").read_text())
        console.print(candidates_table(
            candidates, f"{len(candidates['candidates'])} candidate nests of "
                        f"model '{cfg.model.name}' (fusion={cfg.lowering.fusion})",
            profiled, decided, width=console.width))
    if profiled is not None:
        info = json.loads((Path(stages["profile"]["dir"]) / "profile.json").read_text())
        console.print(f"forward {info['forward_s'] * 1e3:.3g} ms ({info['estimator']} of "
                      f"{info['repetitions']}, median {info['forward_median_s'] * 1e3:.3g} ms), "
                      f"nests cover {info['coverage']:.1%} of it; "
                      f"counters: [bold]{info['counter_backend']}[/] "
                      f"({info['counter_backend_reason']})")
    if "calibrate" in stages:
        cal = json.loads((Path(stages["calibrate"]["dir"]) / "calibrate.json").read_text())
        theta = policy_params(cfg).theta(cal["b_cpu_gbps"])
        console.print(f"B_cpu {cal['b_cpu_gbps']:.3g} GB/s ({cal['source']}); "
                      f"theta {theta:.3g} GB/s")
    if has("lower", "signature.json"):
        sig = json.loads((Path(stages["lower"]["dir"]) / "signature.json").read_text())
        if sig.get("cast"):
            console.print(cast_line(cfg.model.name, sig["cast"], cfg.model.dtype),
                          soft_wrap=True, markup=False)
        if sig.get("evaluated"):
            console.print(evaluated_line(cfg.model.name, sig["evaluated"]),
                          soft_wrap=True, markup=False)
    if "simulate" in stages:
        report = json.loads((Path(stages["simulate"]["dir"]) / "report.json").read_text())
        for line in report.get("summary") or report_lines(report):
            console.print(line, soft_wrap=True)
        console.print(f"report: {Path(stages['simulate']['dir']) / 'report.md'}")
    console.print(summary_table(rows, f"pimbuild: model={cfg.model.name}, "
                                      f"{len(result.executed)} stage(s) built, "
                                      f"{len(result.cached)} up to date"))
    console.print(f"manifest: {run_dir / 'manifest.json'}")
    log.info("built %s, up to date %s", result.executed, result.cached)
