"""Caching (docs/design.md §2): content-addressed artifacts, the manifest, rebuilds."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.conftest import store_entries

SMALL = ["model=relu", "model.size.n=256", "profile.backend=timer", "profile.repetitions=3",
         "stages=[profile]"]
ALL = ["lower", "extract", "runtime", "calibrate", "instrument", "profile"]


@pytest.mark.slow
def test_second_identical_run_executes_nothing(run_build) -> None:
    first = run_build(SMALL)
    assert first.executed == ALL
    second = run_build(SMALL)
    assert second.executed == []
    assert second.cached == ALL
    assert second.manifest["stages"] == first.manifest["stages"]


def test_pim_cores_change_reruns_neither_lower_nor_extract(run_build) -> None:
    first = run_build(SMALL)
    again = run_build([*SMALL, "pim.cores=32"])
    assert again.executed == []
    assert again.manifest["stages"] == first.manifest["stages"]


@pytest.mark.slow
def test_fusion_change_reruns_lower_and_extract(run_build) -> None:
    softmax = ["model=softmax", "model.size.rows=4", "model.size.cols=64",
               "profile.backend=timer", "profile.repetitions=3", "stages=[profile]"]
    first = run_build(softmax)
    changed = run_build([*softmax, "lowering.fusion=none"])
    assert changed.executed == ["lower", "extract", "instrument", "profile"]
    assert changed.cached == ["runtime", "calibrate"]
    for stage in ("lower", "extract", "instrument", "profile"):
        assert changed.manifest["stages"][stage]["key"] != first.manifest["stages"][stage]["key"]


@pytest.mark.slow
def test_register_block_change_reruns_code_generation_only(run_build) -> None:
    first = run_build(SMALL)
    changed = run_build([*SMALL, "lowering.register_block=1"])
    assert changed.executed == ["calibrate", "instrument", "profile"]
    assert changed.cached == ["lower", "extract", "runtime"]
    assert changed.manifest["stages"]["lower"] == first.manifest["stages"]["lower"]


def test_targets_stop_at_lower(run_build) -> None:
    result = run_build([*SMALL[:-1], "stages=[lower]"])
    assert list(result.manifest["stages"]) == ["lower"]
    assert result.executed == ["lower"]


def test_a_timeline_asked_of_a_build_without_simulate_is_named_missing(run_build,
                                                                       capsys) -> None:
    run_build([*SMALL[:-1], "stages=[lower]"])
    assert "no timeline.json" not in capsys.readouterr().out
    run_build([*SMALL[:-1], "stages=[lower]", "timeline=true"])
    out = capsys.readouterr().out
    assert "timeline=true: no timeline.json" in out and "stages=['lower']" in out


def test_manifest_shape_and_hashes(run_build, tmp_path: Path) -> None:
    result = run_build(SMALL)
    manifest = json.loads((tmp_path / "run0" / "manifest.json").read_text())
    assert set(manifest) == {"stages", "versions"}
    assert set(manifest["stages"]) == set(ALL)
    assert set(manifest["stages"]["extract"]["files"]) == {"candidates.json"}
    assert {"torch.mlir", "linalg.mlir", "scf.mlir", "signature.json"} == set(
        manifest["stages"]["lower"]["files"])
    for stage in manifest["stages"].values():
        assert set(stage) == {"key", "dir", "files"}
        assert Path(stage["dir"]).is_absolute()
        assert Path(stage["dir"]).name == stage["key"]
        for name, digest in stage["files"].items():
            data = (Path(stage["dir"]) / name).read_bytes()
            assert hashlib.sha256(data).hexdigest() == digest
    assert manifest["versions"]["torch"].startswith("2.13.0")
    assert manifest == json.loads(json.dumps(result.manifest))


def test_store_holds_only_complete_artifacts(run_build, store: Path) -> None:
    run_build(SMALL)
    entries = store_entries(store)
    assert len(entries) == len(ALL)
    assert all((e / ".complete").is_file() and not e.name.startswith(".tmp") for e in entries)


def test_recipe_size_is_part_of_the_key(run_build) -> None:
    a = run_build([*SMALL[:-1], "stages=[extract]"])
    b = run_build([*SMALL[:-1], "model.size.n=512", "stages=[extract]"])
    assert a.manifest["stages"]["lower"]["key"] != b.manifest["stages"]["lower"]["key"]
    assert b.executed == ["lower", "extract"]


def test_register_block_null_is_chosen_on_this_host_and_used(run_build) -> None:
    """lowering.register_block=null: calibrate times the candidates on an MLP of
    platform.calibration_mib and records the fastest; instrument compiles with it (and says
    so)."""
    result = run_build(["model=gemv", "model.size.m=256", "model.size.n=256",
                        "lowering.register_block=null",
                        "lowering.register_block_candidates=[1,4]", "stages=[instrument]"])
    calibrated = json.loads((Path(result.manifest["stages"]["calibrate"]["dir"])
                             / "calibrate.json").read_text())["register_block"]
    assert calibrated["source"] == "search"
    assert set(calibrated["best_s"]) == {"1", "4"}
    size = calibrated["size"]  # as much weight as calibrate streams (tests: 16 MiB)
    assert 2 * size["hidden"] * size["ffn"] * 4 == 16 << 20
    assert calibrated["value"] == min((float(t), int(b)) for b, t in
                                      calibrated["best_s"].items())[1]
    codegen = json.loads((Path(result.manifest["stages"]["instrument"]["dir"])
                          / "codegen.json").read_text())
    assert codegen["register_block"] == calibrated["value"]
    assert codegen["register_blocked_nests"] == (1 if calibrated["value"] > 1 else 0)
