"""A second host-plus-accelerator target on the offload core: an NPU reached by DMA
(``tests/npu_target/``, outside pimbuild) builds end to end with the core's stages, rule,
copy models, eq. 9 and report, from a package of one file and a YAML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pimbuild.build.driver import build
from pimbuild.targets.offload.policies.torchpim import c1_threshold_s, rule_params
from tests.conftest import artifact_dir, make_cfg

NPU = Path(__file__).parents[2] / "npu_target"
# Everything the NPU target is: its package (one module) and the YAML that names it.
NPU_FILES = ["conf/system/npu.yaml", "npu/__init__.py"]


def _cfg(tmp_path: Path, monkeypatch, *overrides: str):
    monkeypatch.syspath_prepend(str(NPU))
    return make_cfg(tmp_path / "store", [f"hydra.searchpath=[file://{NPU / 'conf'}]",
                                         "system=npu", *overrides])


def test_the_npu_target_is_one_module_and_a_yaml() -> None:
    files = sorted(str(p.relative_to(NPU)) for p in NPU.rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts)
    assert files == NPU_FILES


def test_the_rule_reads_only_the_protocol(tmp_path: Path, monkeypatch) -> None:
    """The paper's rule on the NPU: N_core is its tiles, and C1's fixed costs are its own
    (two hand-overs and a launch, no per-core sync), from ``costs`` alone."""
    from pimbuild import targets
    from pimbuild.targets.offload.copymodels import UPPER_BOUND
    from pimbuild.targets.offload.decide import policy_params
    from pimbuild.targets.offload.policies import PolicyContext

    cfg = _cfg(tmp_path, monkeypatch)
    npu = targets.from_config(cfg)
    ctx = PolicyContext([], 1e-3, set(), 10.0, policy_params(cfg), npu, UPPER_BOUND)
    p = rule_params(ctx)
    assert p.n_core == 8 and p.record()["lanes"] == 16
    fixed = c1_threshold_s(0, 1, 1 << 20, p)  # no work: the fixed costs alone
    assert fixed == pytest.approx(2 * 6e-6 + 2e-6)
    # a target of other sizes: the rule follows the protocol's units
    assert rule_params(ctx.with_units(32)).n_core == 32


def test_dma_copies_cost_a_setup_per_transfer(tmp_path: Path, monkeypatch) -> None:
    from pimbuild import targets

    npu = targets.from_config(_cfg(tmp_path, monkeypatch))
    assert npu.copy_time(0, 0) == 0.0
    assert npu.copy_time(12_000, 0) == pytest.approx(4e-6 + 1e-6)
    assert npu.copy_time(12_000, 12_000) == pytest.approx(2 * 4e-6 + 2e-6)


@pytest.mark.slow
def test_the_npu_target_builds_end_to_end(tmp_path: Path, monkeypatch) -> None:
    cfg = _cfg(tmp_path, monkeypatch, "model=mlp", "policy=oracle", "sim.cores_sweep=[4,8]")
    result = build(cfg, tmp_path / "run")
    stages = list(result.manifest["stages"])
    assert stages[-3:] == ["decide", "reinsert", "simulate"] and "profile" in stages
    out = artifact_dir(result, "simulate")
    report = json.loads((out / "report.json").read_text())
    assert report["tiles"] == 8 and [row["tiles"] for row in report["sweep"]] == [4, 8]
    assert {"t_host_s", "t_npu_s"} <= set(report) and "max_rel_error" in report["hybrid_check"]
    assert all("t_npu_s" in n and n["target"] in ("host", "npu") for n in report["nests"])
    assert report["model"]["dma_setup_us"] == 4.0
    text = (out / "report.md").read_text()
    assert "8 NPU tiles" in text and "| T_npu |" in text
    decisions = json.loads((artifact_dir(result, "decide") / "decisions.json").read_text())
    assert {d["target"] for d in decisions["decisions"]} <= {"host", "npu"}
    hybrid = (artifact_dir(result, "reinsert") / "hybrid.mlir").read_text()
    assert ("npu_kernel_" in hybrid) == bool(decisions["offloaded"])
