"""A Hydra callback that closes a multirun with one table and one plot across its jobs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from rich.table import Table

from pimbuild.console import console

SUMMARY = "sweep_summary"


def collect(sweep_dir: Path) -> list[dict[str, Any]]:
    """One row per job of the sweep that reached simulate, in job order."""
    rows = []
    for manifest_path in sorted(sweep_dir.glob("*/manifest.json"),
                                key=lambda p: int(p.parent.name.split("_")[0])):
        job = manifest_path.parent
        stages = json.loads(manifest_path.read_text())["stages"]
        if "simulate" not in stages:
            continue
        report = json.loads((Path(stages["simulate"]["dir"]) / "report.json").read_text())
        overrides = OmegaConf.load(job / ".hydra" / "overrides.yaml")
        build = json.loads((job / "build.json").read_text())
        rows.append({"job": job.name, "overrides": list(overrides),
                     "speedup": report["speedup"], "policy": report["policy"],
                     "cores": report["cores"], "theta_gbps": report["theta_gbps"],
                     "offloaded": report["offloaded"], "n_region": report["n_region"],
                     "accuracy": report["agreement"]["accuracy"],
                     "baselines": report["baselines"], "executed": build["executed"]})
    return rows


def write(rows: list[dict[str, Any]], sweep_dir: Path) -> Table:
    (sweep_dir / f"{SUMMARY}.json").write_text(json.dumps(rows, indent=2) + "\n")
    table = Table(title=f"sweep {sweep_dir}", title_justify="left")
    for col in ("job", "overrides", "speedup", "oracle", "offloaded", "N_region", "accuracy",
                "stages run"):
        table.add_column(col)
    md = ["| job | overrides | speedup | oracle | offloaded | N_region | accuracy | stages run |",
          "|---|---|---:|---:|---|---:|---:|---|"]
    for r in rows:
        cells = [r["job"], " ".join(r["overrides"]), f"{r['speedup']:.3f}",
                 f"{r['baselines']['oracle']:.3f}", str(r["offloaded"]), str(r["n_region"]),
                 f"{r['accuracy']:.3f}", ",".join(r["executed"]) or "none"]
        table.add_row(*cells)
        md.append("| " + " | ".join(cells) + " |")
    (sweep_dir / f"{SUMMARY}.md").write_text("\n".join(md) + "\n")
    _plot(rows, sweep_dir / f"{SUMMARY}.png")
    return table


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    from pimbuild.report import plt, save_figure

    fig, ax = plt.subplots(figsize=(max(5, 0.6 * len(rows)), 3.5))
    labels = [" ".join(r["overrides"]) or r["job"] for r in rows]
    ax.bar(range(len(rows)), [r["speedup"] for r in rows], label="policy")
    ax.plot(range(len(rows)), [r["baselines"]["oracle"] for r in rows], "k_", ms=20,
            mew=2, label="oracle")
    ax.set_xticks(range(len(rows)), labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("speedup over CPU-only")
    ax.legend()
    save_figure(fig, path)


class SweepSummary(Callback):
    """``hydra.callbacks``: after a multirun, summarize every job's report."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        rows = collect(sweep_dir)
        if rows:
            console.print(write(rows, sweep_dir))
            console.print(f"sweep summary: {sweep_dir / (SUMMARY + '.md')}")
