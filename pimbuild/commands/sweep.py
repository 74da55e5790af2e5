"""A Hydra callback that closes a multirun with one table and one plot across its jobs.

A job that fails writes its error to ``error.txt`` in its directory and the sweep goes on
(``pimbuild.commands.cli``); the summary lists it, and the command exits 1 after the summary.
"""

from __future__ import annotations

import html
import json
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from rich.markup import escape
from rich.table import Table

from pimbuild.build.page import image, page, table
from pimbuild.core.console import console

SUMMARY = "sweep_summary"
FAILED = "error.txt"


def job_files(sweep_dir: Path, name: str) -> list[Path]:
    """The file ``name`` of every job of the sweep that has one, in job order (``<n>_...``)."""
    return sorted(sweep_dir.glob(f"*/{name}"), key=lambda p: int(p.parent.name.split("_")[0]))


def collect(sweep_dir: Path) -> list[dict[str, Any]]:
    """One row per job of the sweep that reached simulate, in job order. A report names its
    own columns (``sweep_columns``) and plotted number (``headline``), whatever its target."""
    rows = []
    for manifest_path in job_files(sweep_dir, "manifest.json"):
        job = manifest_path.parent
        stages = json.loads(manifest_path.read_text())["stages"]
        if "simulate" not in stages or (job / FAILED).exists():
            continue
        report = json.loads((Path(stages["simulate"]["dir"]) / "report.json").read_text())
        overrides = OmegaConf.load(job / ".hydra" / "overrides.yaml")
        build = json.loads((job / "build.json").read_text())
        rows.append({"job": job.name, "overrides": list(overrides),
                     "columns": report["sweep_columns"], "headline": report["headline"],
                     "executed": build["executed"]})
    return rows


def failures(sweep_dir: Path) -> list[tuple[str, str]]:
    """(job, first line of its error) for every job of the sweep that failed, in job order."""
    return [(p.parent.name, p.read_text().partition("\n")[0])
            for p in job_files(sweep_dir, FAILED)]


def write(rows: list[dict[str, Any]], sweep_dir: Path) -> Table:
    (sweep_dir / f"{SUMMARY}.json").write_text(json.dumps(rows, indent=2) + "\n")
    names = list(dict.fromkeys(c for r in rows for c in r["columns"]))
    header = ["job", "overrides", *names, "stages run"]
    table = Table(title=f"sweep {sweep_dir}", title_justify="left")
    for col in header:
        table.add_column(col)
    md = ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * len(names) + "---|"]
    for r in rows:
        cells = [r["job"], " ".join(r["overrides"]),
                 *(r["columns"].get(c, "") for c in names), ",".join(r["executed"]) or "none"]
        table.add_row(*cells)
        md.append("| " + " | ".join(cells) + " |")
    (sweep_dir / f"{SUMMARY}.md").write_text("\n".join(md) + "\n")
    _plot(rows, sweep_dir / f"{SUMMARY}.png")
    return table


def sweep_page(sweep_dir: Path, rows: list[dict[str, Any]],
               failed: list[tuple[str, str]]) -> str:
    """The sweep's ``report.html``: its table, its plot inline, each job's own page linked
    (relative, so the sweep folder can move), the failed jobs."""
    names = list(dict.fromkeys(c for r in rows for c in r["columns"]))
    body = table(["job", "overrides", *names, "stages run"],
                 [[r["job"], " ".join(r["overrides"]), *(r["columns"].get(c, "") for c in names),
                   ",".join(r["executed"]) or "none"] for r in rows])
    sections = [("Jobs", body)]
    plot = sweep_dir / f"{SUMMARY}.png"
    if rows and plot.is_file():
        sections.append(("Plot", image(plot)))
    pages = [p.parent.name for p in job_files(sweep_dir, "report.html")]
    sections.append(("Job pages", "<ul>" + "".join(
        f'<li><a href="{html.escape(j)}/report.html">{html.escape(j)}</a></li>'
        for j in pages) + "</ul>"))
    if failed:
        sections.append(("Failed jobs", table(["job", "error"], [list(f) for f in failed])))
    return page(f"pimbuild sweep {sweep_dir.name}: {len(rows)} job(s), {len(failed)} failed",
                sections)


def _plot(rows: list[dict[str, Any]], path: Path) -> None:
    from pimbuild.core.plots import plt, save_figure

    fig, ax = plt.subplots(figsize=(max(5, 0.6 * len(rows)), 3.5))
    labels = [" ".join(r["overrides"]) or r["job"] for r in rows]
    heads = [r["headline"] for r in rows]
    ax.bar(range(len(rows)), [h["value"] for h in heads], label="planned")
    marked = [(i, h["reference"]) for i, h in enumerate(heads) if h.get("reference")]
    if marked:
        ax.plot(*zip(*marked, strict=True), "k_", ms=20, mew=2,
                label=heads[marked[0][0]]["reference_label"])
    ax.set_xticks(range(len(rows)), labels, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(" / ".join(dict.fromkeys(h["label"] for h in heads)))
    ax.legend()
    save_figure(fig, path)


class SweepSummary(Callback):
    """``hydra.callbacks``: after a multirun, summarize every job's report."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        rows = collect(sweep_dir)
        failed = failures(sweep_dir)
        if rows:
            console.print(write(rows, sweep_dir))
            console.print(f"sweep summary: {sweep_dir / (SUMMARY + '.md')}")
        (sweep_dir / "report.html").write_text(sweep_page(sweep_dir, rows, failed))
        console.print(f"sweep page: {sweep_dir / 'report.html'}")
        if not failed:
            return
        for job, line in failed:
            console.print(f"[red]job {job} failed[/red]: {escape(line)}", soft_wrap=True)
        md = sweep_dir / f"{SUMMARY}.md"
        with md.open("a") as f:
            f.write("\n## Failed jobs\n\n" + "".join(f"- {job}: {line}\n" for job, line in failed))
        console.print(f"{len(failed)} of the sweep's jobs failed (their error.txt; {md})")
        sys.exit(1)
