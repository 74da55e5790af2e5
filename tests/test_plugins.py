"""Pluggable parts: a policy or a counter backend defined here runs through the pipeline
without an edit anywhere else; registries import nothing until asked."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from pimbuild.targets.offload.counters import BACKENDS, CounterRun
from pimbuild.targets.offload.policies import POLICIES, Decision, Placement, PolicyContext
from tests.conftest import artifact_dir

SOFTMAX = ["model=softmax", "model.size.rows=64", "model.size.cols=4096",
           "profile.repetitions=3"]


def largest_only(ctx: PolicyContext) -> Placement:
    """Offload the one nest with the largest host time, keep the rest."""
    top = max(ctx.nests, key=lambda n: n.t_cpu_s)
    return Placement({"rule": "largest T_cpu"}, [
        Decision(n.id, ctx.target.device if n is top else ctx.target.host, "largest",
                 f"T_cpu {n.t_cpu_s:.3g} s") for n in ctx.nests])


@pytest.mark.slow
def test_a_policy_defined_in_a_test_is_one_registration(run_build) -> None:
    POLICIES.register("largest_only", largest_only)
    try:
        result = run_build([*SOFTMAX, "policy.name=largest_only"])
        torchpim = run_build(SOFTMAX)
    finally:
        POLICIES.unregister("largest_only")
    decisions = json.loads((artifact_dir(result, "decide") / "decisions.json").read_text())
    with (artifact_dir(result, "profile") / "timing.csv").open() as f:
        slowest = max(csv.DictReader(f), key=lambda r: float(r["t_cpu_s"]))["id"]
    assert decisions["policy"] == "largest_only"
    assert decisions["params"] == {"rule": "largest T_cpu"}
    assert decisions["offloaded"] == [int(slowest)]
    report = json.loads((artifact_dir(result, "simulate") / "report.json").read_text())
    assert report["offloaded"] == [int(slowest)]
    assert all("largest_only" in row for row in report["sweep"])
    # Same profile, another policy: only decide onward differs.
    for stage in ("lower", "extract", "profile", "calibrate"):
        assert result.manifest["stages"][stage] == torchpim.manifest["stages"][stage]
    assert result.manifest["stages"]["decide"]["key"] != torchpim.manifest["stages"][
        "decide"]["key"]


def _every_nest_streams(run: CounterRun) -> list[dict]:
    return [{"id": c["id"], "source_op": c["source_op"], "counter_source": "fixed",
             "counts": {"offcore_data_rd": 10**9}} for c in run.program.candidates]


@pytest.mark.slow
def test_a_counter_backend_defined_in_a_test_feeds_the_rule(run_build) -> None:
    BACKENDS.register("fixed", SimpleNamespace(available=lambda run: (True, "always"),
                                               count=_every_nest_streams))
    try:
        result = run_build([*SOFTMAX, "profile.backend=fixed", "policy.theta_gbps=1.0"])
    finally:
        BACKENDS.unregister("fixed")
    with (artifact_dir(result, "profile") / "counters.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert {r["counter_source"] for r in rows} == {"fixed"}
    assert all(float(r["bw_read_gbps"]) > 1.0 for r in rows)
    decisions = json.loads((artifact_dir(result, "decide") / "decisions.json").read_text())
    assert {d["decided_by"] for d in decisions["decisions"]} <= {"C1", "C2", "C3"}
    assert "C3" in {d["decided_by"] for d in decisions["decisions"]}


def test_registries_list_names_without_importing() -> None:
    code = ("import sys\n"
            "from pimbuild.targets.offload.counters import BACKENDS\n"
            "from pimbuild.targets.offload.policies import POLICIES\n"
            "from pimbuild.targets import TARGETS\n"
            "from pimbuild.frontend.fusions import FUSIONS\n"
            "print(BACKENDS.names(), POLICIES.names(), TARGETS.names(), FUSIONS.names())\n"
            "heavy = ('torch', 'torch_mlir.ir', 'matplotlib',"
            " 'pimbuild.targets.offload.counters.valgrind',"
            " 'pimbuild.targets.offload.policies.oracle',"
            " 'pimbuild.targets.offload.simulate')\n"
            "print(sorted(m for m in heavy if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert out[0] == ("['footprint', 'papi', 'timer', 'valgrind'] ['cpu', 'joint', 'operator', "
                      "'oracle', "
                      "'torchpim'] ['gpus', 'pim'] ['controlled', 'full', 'none']")
    assert out[1] == "[]"
