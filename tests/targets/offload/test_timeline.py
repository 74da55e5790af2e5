"""The offload core's timeline (``timeline=true``): one forward's eq. 9 schedule in the Trace
Event format, its spans adding up to T_hybrid, each lane holding what the placement put
there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pimbuild.core.trace import check
from pimbuild.targets.offload import hybrid
from pimbuild.targets.offload.copymodels import CopyModel
from pimbuild.targets.offload.timeline import timeline
from tests.targets.pim.test_pim_model import MODEL, nest


def _spans(path: Path) -> list[dict]:
    return [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]


def _lanes(path: Path) -> dict[tuple[int, int], str]:
    return {(e["pid"], e["tid"]): e["args"]["name"]
            for e in json.loads(path.read_text())["traceEvents"]
            if e["ph"] == "M" and e["name"] == "thread_name"}


@pytest.mark.parametrize("copy_model", ["upper_bound", "resident"])
@pytest.mark.parametrize("offloaded", [set(), {1}, {0, 1}, {1, 3}, {0, 1, 2, 3}])
def test_the_spans_add_up_to_eq9(tmp_path: Path, copy_model: str, offloaded: set) -> None:
    nests = [nest(i, n_iter=1 << 14, reads={f"a{i}": 1 << 16}, writes={f"a{i + 1}": 1 << 16})
             for i in range(4)]
    b = hybrid.hybrid(nests, offloaded, 5e-3, MODEL, CopyModel(copy_model), {"a4"})
    counts = timeline(nests, offloaded, 5e-3, MODEL, CopyModel(copy_model), {"a4"}).write(
        tmp_path / "t.json")
    spans, lanes = _spans(tmp_path / "t.json"), _lanes(tmp_path / "t.json")
    assert sum(s["dur"] for s in spans) * 1e-6 == pytest.approx(b.t_hybrid_s, rel=1e-12)
    end = max(s["ts"] + s["dur"] for s in spans) * 1e-6
    assert end == pytest.approx(b.t_hybrid_s, rel=1e-12)  # serial: no gap, no overlap
    on = {lane: [s for s in spans if lanes[s["pid"], s["tid"]] == lane]
          for lane in set(lanes.values())}
    assert {s["args"]["nest"] for s in on.get("pim", [])} == offloaded
    assert len(on.get("switch", [])) == 2 * len(hybrid.segments(nests, offloaded))
    assert counts["spans"] == len(spans) == check(tmp_path / "t.json")["spans"]


def test_a_trace_that_is_not_one_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "k", "pid": 1, "tid": 1,
                                                "ts": -1.0, "dur": 2.0}]}))
    with pytest.raises(ValueError, match="below zero"):
        check(bad)


@pytest.mark.slow
def test_a_build_with_timeline_names_the_file(run_build) -> None:
    from tests.conftest import artifact_dir

    result = run_build(["model=mlp", "timeline=true"])
    out = artifact_dir(result, "simulate")
    report = json.loads((out / "report.json").read_text())
    assert report["timeline"]["file"] == "timeline.json"
    counts = check(out / "timeline.json")
    assert counts == report["timeline"]["events"] and counts["spans"] >= len(report["nests"])

