"""The run's console output stays readable in an 80-column terminal or log."""

from __future__ import annotations

import csv
import json

from rich.console import Console

from pimbuild.targets.offload.summary import candidates_table
from tests.conftest import artifact_dir


def test_candidates_table_fits_80_columns(run_build) -> None:
    result = run_build(["model=softmax", "model.size.rows=4", "model.size.cols=64",
                        "profile.backend=timer"])
    candidates = json.loads((artifact_dir(result, "extract") / "candidates.json").read_text())
    rows: dict[int, dict] = {}
    for name in ("timing.csv", "counters.csv"):
        with (artifact_dir(result, "profile") / name).open() as f:
            for row in csv.DictReader(f):
                rows.setdefault(int(row["id"]), {}).update(row)
    decisions = {d["id"]: d for d in json.loads(
        (artifact_dir(result, "decide") / "decisions.json").read_text())["decisions"]}
    for width, header in ((80, "placed"), (160, "ld/st/ar/m")):
        console = Console(width=width, record=True)
        console.print(candidates_table(candidates, "t", rows, decisions, width=width))
        text = console.export_text()
        assert max(len(line) for line in text.splitlines()) <= width
        assert "…" not in text and header in text


def test_summary_names_eight_offloaded_sources_and_counts_the_rest() -> None:
    # A 12-layer encoder offloaded 25 nests: the line listed every layer's operators.
    from pimbuild.targets.offload.summary import first

    names = [f"layers.{i}.linear1" for i in range(10)]
    assert first(names) == ", ".join(names[:8]) + " and 2 more in report.md"
    assert first(names[:3]) == ", ".join(names[:3])
