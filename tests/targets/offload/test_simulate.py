"""decide -> reinsert -> simulate through the build: placements, reruns, the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import artifact_dir, run_cli

STREAM = ["model=relu", "model.size.n=1048576"]


def _report(result) -> dict:
    return json.loads((artifact_dir(result, "simulate") / "report.json").read_text())


@pytest.mark.slow
def test_streaming_kernel_offloaded_whole(run_build) -> None:
    result = run_build(STREAM)
    r = _report(result)
    (nest,) = r["nests"]
    assert nest["target"] == "pim" and nest["decided_by"] == "C3"
    assert r["offloaded"] == [0] and r["n_region"] == 2
    # Whether PIM beats this host depends on the host's bandwidth; the arithmetic does not.
    assert r["speedup"] == pytest.approx(r["t_cpu_only_s"] / r["t_hybrid_s"])
    assert r["t_hybrid_s"] == pytest.approx(r["t_host_s"] + r["t_pim_s"] + r["t_copy_s"]
                                            + r["t_switch_s"])
    speedups = [row["torchpim"]["speedup"] for row in r["sweep"]]
    assert speedups == sorted(speedups)  # more cores never hurt a streaming kernel here
    for key in ("speedup", "t_hybrid_s", "t_cpu_only_s", "t_host_s", "t_pim_s", "t_copy_s",
                "n_region", "offloaded", "agreement"):
        assert key in r
    sim = artifact_dir(result, "simulate")
    for plot in ("speedup_vs_cores.png", "bandwidth_vs_theta.png", "time_breakdown.png"):
        assert (sim / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "Speedup over CPU-only" in (sim / "report.md").read_text()
    hybrid = (artifact_dir(result, "reinsert") / "hybrid.mlir").read_text()
    assert "func.func private @pim_nest_0" in hybrid and 'pimbuild.target = "pim"' in hybrid
    assert "call @pim_offload_begin" in hybrid and "call @pim_offload_end" in hybrid


@pytest.mark.slow
def test_speedup_over_eager_from_the_eager_stage(run_build) -> None:
    """The eager stage times the CPU-only program against eager; the report divides the
    speedup by their ratio, and says so in report.md. Without the comparison there is no
    such number, and changing it times nothing else again."""
    result = run_build(STREAM)
    r = _report(result)
    eager = json.loads((artifact_dir(result, "eager") / "eager.json").read_text())["comparison"]
    assert eager["rounds"] >= 10 and eager["threads"] == 1
    assert eager["ratio_p25"] <= eager["ratio"] <= eager["ratio_p75"]
    over = r["over_eager"]
    assert over["cpu_only_over_eager"] == eager["ratio"]
    assert over["speedup"] == pytest.approx(r["speedup"] / eager["ratio"])
    text = (artifact_dir(result, "simulate") / "report.md").read_text()
    assert f"speedup over eager {over['speedup']:.3f}x" in text
    off = run_build([*STREAM, "profile.eager_rounds=0"])
    assert off.executed == ["eager", "simulate"]
    assert _report(off)["over_eager"] is None
    assert "over eager" not in (artifact_dir(off, "simulate") / "report.md").read_text()


@pytest.mark.slow
def test_report_invariants(run_build) -> None:
    r = _report(run_build(["model=softmax", "model.size.rows=256", "model.size.cols=4096"]))
    assert r["t_copy"]["resident"] <= r["t_copy"]["upper_bound"] + 1e-15
    assert all(r["baselines"]["oracle"] >= s - 1e-12
               for s in (r["speedup"], *r["baselines"].values()))
    assert r["baselines"]["cpu"] == 1.0
    for n in r["nests"]:
        assert n["t_pim_s"] >= n["c1_bound_s"]
    a = r["agreement"]
    assert a["agree"] + a["false_positives"] + a["false_negatives"] == a["total"]
    # each offloaded nest counted once under its operator's name ("name x2" for two)
    sources = [s.rsplit(" x", 1) for s in r["offloaded_sources"]]
    assert sum(int(k[1]) if len(k) == 2 else 1 for k in sources) == len(r["offloaded"])
    assert len({k[0] for k in sources}) == len(sources)


@pytest.mark.slow
def test_false_positives_listed_costliest_first(run_build) -> None:
    """A nest of a few microseconds that C1 (the paper's, with T_ctx 0) and theta 0 let
    through loses to the switches, launch and sync under the model: the report names it
    with what offloading it alone adds to T_hybrid."""
    result = run_build(["model=relu", "model.size.n=16384", "policy.c1=paper",
                        "pim.t_ctx_us=0", "policy.theta_gbps=0.0"])
    r = _report(result)
    fps = r["false_positives"]
    assert len(fps) == r["agreement"]["false_positives"] >= 1
    by_id = {n["id"]: n for n in r["nests"]}
    for f in fps:
        assert by_id[f["id"]]["target"] == "pim" and not by_id[f["id"]]["beneficial"]
        assert f["loss_s"] >= 0
    assert [f["loss_s"] for f in fps] == sorted((f["loss_s"] for f in fps), reverse=True)
    text = (artifact_dir(result, "simulate") / "report.md").read_text()
    assert "Costliest false positives" in text and f"#{fps[0]['id']} +" in text


@pytest.mark.slow
def test_cpu_policy_has_speedup_one(run_build) -> None:
    r = _report(run_build([*STREAM, "policy=cpu"]))
    assert r["speedup"] == 1.0 and r["offloaded"] == [] and r["n_region"] == 0


@pytest.mark.slow
def test_cores_change_reruns_decide_onward_only(run_build) -> None:
    run_build(STREAM)
    again = run_build([*STREAM, "pim.cores=32"])
    assert again.executed == ["decide", "reinsert", "simulate"]
    assert _report(again)["cores"] == 32


@pytest.mark.slow
def test_policy_change_reuses_the_profile(run_build) -> None:
    run_build(STREAM)
    again = run_build([*STREAM, "policy.theta_ratio=0.48"])
    assert again.executed == ["decide", "reinsert", "simulate"]
    assert "profile" in again.cached


@pytest.mark.slow
def test_threshold_sweep_reuses_profile_and_summarizes(tmp_path: Path) -> None:
    proc = run_cli(["-m", *STREAM, "policy.theta_ratio=0.03,0.12,0.48",
                    "platform.calibration_mib=16", "profile.repetitions=3",
                    f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = json.loads((tmp_path / "sweep" / "sweep_summary.json").read_text())
    assert len(rows) == 3
    assert "profile" in rows[0]["executed"]
    assert all("profile" not in r["executed"] for r in rows[1:])
    assert (tmp_path / "sweep" / "sweep_summary.png").is_file()
    assert "sweep" in proc.stdout
