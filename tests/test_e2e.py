"""The decoder layers: small shapes in-process, and the full LLaMA-7B layer end to end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import artifact_dir, candidates, run_cli

SMALL = {
    "llama7b": ["model.size.hidden=256", "model.size.heads=4", "model.size.ffn=512",
                "model.size.kv_len=8"],
    "gptj6b": ["model.size.hidden=256", "model.size.heads=4", "model.size.ffn=512",
               "model.size.rotary_dim=16", "model.size.kv_len=8"],
}
PROJECTIONS = {
    "llama7b": ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"],
    "gptj6b": ["attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.out_proj", "mlp.fc_in",
               "mlp.fc_out"],
}


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(SMALL))
def test_small_layer_pipeline(run_build, model: str) -> None:
    result = run_build([f"model={model}", *SMALL[model]])
    modules = {c["source_module"] for c in candidates(result)}
    assert set(PROJECTIONS[model]) <= modules
    check = json.loads((artifact_dir(result, "reinsert") / "reinsert.json").read_text())
    assert check["check"]["max_rel_error"] <= 1e-5
    # Each projection is one reduction nest that reads its weight argument in place: the
    # transpose torch-mlir emits for a Linear is fused, not copied into a temporary first.
    nests = candidates(result)
    for proj in PROJECTIONS[model]:
        (mm,) = [c for c in nests if c["source_module"] == proj and c["n_total"] > c["n_iter"]]
        (weight,) = [a for a, nbytes in mm["reads"].items() if nbytes >= 256 * 256 * 4]
        assert weight.startswith("arg")


@pytest.mark.slow
def test_llama7b_end_to_end(tmp_path: Path) -> None:
    proc = run_cli(["model=llama7b", "pim.cores=128", "show_candidates=false"], cwd=tmp_path,
                   timeout=1800)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = next((tmp_path / "outputs" / "runs" / "llama7b").iterdir())
    stages = json.loads((run / "manifest.json").read_text())["stages"]
    report = json.loads((Path(stages["simulate"]["dir"]) / "report.json").read_text())
    assert len(report["nests"]) > 40
    assert report["hybrid_check"]["max_rel_error"] <= 1e-5
    assert report["hybrid_check"]["transitions"] == report["n_region"]
    assert report["speedup"] >= 1.0
    assert report["baselines"]["oracle"] >= report["speedup"] - 1e-12
    named = {n["source_module"] for n in report["nests"]}
    assert set(PROJECTIONS["llama7b"]) <= named
    assert "speedup" in proc.stdout and "offloaded" in proc.stdout
