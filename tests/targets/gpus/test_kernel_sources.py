"""The public sources beyond AIConfigurator: Vidur's forks, LLMServingSim's vLLM profiles, and
the plausibility check every source's rows pass (``pimbuild-kernels data``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pimbuild.core.errors import ConfigError
from pimbuild.targets.gpus.kerneltime import cli, grid, ops, sources
from tests.targets.gpus.test_kernel_model import write_repo

DEVICES = Path(__file__).parents[3] / "pimbuild" / "conf" / "device"
LLAMA = {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
         "intermediate_size": 512, "vocab_size": 1000}


def write_lss(root: Path, hardware: str = "RTX4090") -> Path:
    """An LLMServingSim-shaped checkout: one profiled model on ``hardware``."""
    perf = root / sources.LSS_PERF / hardware / "org" / "tiny" / "bf16"
    (perf / "tp1").mkdir(parents=True)
    (perf / "meta.yaml").write_text(f"hardware: {hardware}\nmodel: org/tiny\nvariant: bf16\n"
                                    f"vllm_version: 0.19.0\n")
    (root / "configs" / "model" / "org").mkdir(parents=True)
    (root / "configs" / "model" / "org" / "tiny.json").write_text(json.dumps(LLAMA))
    (perf / "tp1" / "dense.csv").write_text(
        "layer,tokens,time_us\nqkv_proj,8,10.5\nact_fn,8,2.0\nlayernorm,8,1.5\n"
        "embedding,8,1.0\ndown_proj,8,\ngate_up_proj,16,-3\n")
    (perf / "tp1" / "attention.csv").write_text(
        "prefill_chunk,kv_prefill,n_decode,kv_decode,time_us\n"
        "64,0,0,0,9.0\n64,128,0,0,12.0\n0,0,4,256,11.0\n64,0,4,256,20.0\n0,0,0,0,1.0\n")
    return root


def test_llmservingsim_profiles_become_engine_kernels(tmp_path: Path) -> None:
    rows = list(sources.llmservingsim(write_lss(tmp_path / "lss")))
    got = {(r["kernel"], r["op"]): r for r in rows}
    # a layer outside the vocabulary (embedding), a blank and a negative time are not read;
    # nor are a mixed prefill + decode batch and an empty one
    assert sorted(got) == [("act_fn", "silu_mul"), ("attention", "decode_attention"),
                           ("attention", "prefill_attention"), ("layernorm", "add_rmsnorm"),
                           ("qkv_proj", "linear")]
    qkv = got[("qkv_proj", "linear")]
    # 4 query heads + 2 x 2 KV heads of 64: 512 columns over the 256-wide hidden state
    assert (qkv["m"], qkv["n"], qkv["k"], qkv["device"]) == (8, 256, 512, "RTX4090")
    assert (qkv["framework"], qkv["version"], qkv["source"]) == ("vllm", "0.19.0",
                                                                 "llmservingsim")
    prefill = [r for r in rows if r["op"] == "prefill_attention"]
    # a chunk of 64 after 128 cached positions attends over 192
    assert sorted((r["m"], r["n"], r["h"], r["g"], r["k"]) for r in prefill) == [
        (64, 64, 4, 2, 64), (64, 192, 4, 2, 64)]
    decode = got[("attention", "decode_attention")]
    assert (decode["b"], decode["m"], decode["n"]) == (4, 1, 256)
    with pytest.raises(ConfigError, match="is it LLMServingSim's repository"):
        list(sources.llmservingsim(tmp_path))
    # a GPU the catalogue does not know is skipped, not guessed
    assert list(sources.llmservingsim(write_lss(tmp_path / "other", "H20"))) == []


def test_a_chunk_and_a_whole_prompt_are_different_grid_cells(tmp_path: Path) -> None:
    g = grid.Grid()
    for r in sources.llmservingsim(write_lss(tmp_path / "lss")):
        o = ops.Op(r["op"], r["dtype"], *(r.get(c, 1) for c in ops.COLUMNS[2:]))
        g.add(o, r["time_us"] * 1e-6)
    whole = ops.Op("prefill_attention", "bf16", 1, 64, 64, 64, 4, 2)
    chunk = ops.Op("prefill_attention", "bf16", 1, 64, 192, 64, 4, 2)
    assert g.lookup(whole) == (pytest.approx(9e-6), "measured")
    assert g.lookup(chunk) == (pytest.approx(12e-6), "measured")
    # vector kernels are grid cells too: rows interpolated, row length matched exactly
    assert g.lookup(ops.Op("silu_mul", "bf16", 8, h=512))[1] == "measured"
    assert g.lookup(ops.Op("silu_mul", "bf16", 8, h=256)) is None


def test_vidur_forks_add_gpus_and_read_a_copied_file_once(tmp_path: Path) -> None:
    write_repo(tmp_path)
    fork = tmp_path / "fork"
    vid = fork / sources.VIDUR_COMPUTE
    for gpu in ("a40", "rtx4090"):
        (vid / gpu / "meta-llama").mkdir(parents=True)
        (vid / gpu / "meta-llama" / "Llama-2-7b-hf").symlink_to(
            tmp_path / "vd" / sources.VIDUR_COMPUTE / "a40" / "meta-llama" / "Llama-2-7b-hf")
    text = (vid / "rtx4090" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv").read_text()
    blank = text.replace("0.01,", ",", 1)  # a fork's blank cell
    (vid / "rtx4090" / "meta-llama" / "Llama-2-7b-hf").unlink()
    (vid / "rtx4090" / "meta-llama" / "Llama-2-7b-hf").mkdir()
    (vid / "rtx4090" / "meta-llama" / "Llama-2-7b-hf" / "mlp.csv").write_text(blank)
    rows = list(sources.vidur(tmp_path / "vd", fork))
    by = {d: sum(r["device"] == d for r in rows) for d in ("A40", "RTX4090")}
    # the fork's copy of Vidur's A40 file is read once; its blank cell is no row
    assert by == {"A40": 9, "RTX4090": 8}
    with pytest.raises(ConfigError, match="or a fork of it"):
        list(sources.vidur(tmp_path / "vd", tmp_path / "ns"))


def test_rows_no_gpu_could_produce_are_dropped() -> None:
    gpus = sources.devices()
    big = ops.Op("linear", "bf16", 1, 1, 16384, 8192)  # 256 MiB: over twice the L2
    fast = big.work()[1] / (gpus["RTX4090"].mem_gbps * 1e9) * 1e6  # microseconds at peak
    rows = [{"source": "s", "device": "RTX4090", "o": big, "time_us": t}
            for t in (fast, fast / 2, -1.0, float("nan"))]
    rows += [{"source": "t", "device": "RTX4090", "o": ops.Op("add", "bf16", 1, h=64),
              "time_us": 1e-3},  # tiny: a warm cache may serve it at any speed
             {"source": "t", "device": "no such GPU", "o": big, "time_us": 1e-3}]
    kept, dropped = sources.plausible(rows, gpus)
    assert [r["time_us"] for r in kept] == [fast, 1e-3, 1e-3] and dropped == {"s": 3}


def test_engine_sources_rebuild_together(tmp_path: Path, capsys) -> None:
    out = tmp_path / "e.parquet"
    assert cli.main(["data", "--llmservingsim", str(write_lss(tmp_path / "lss")),
                     "--engine-out", str(out)]) == 1
    assert "give both" in capsys.readouterr().err and not out.exists()


def test_the_catalogue_gpus_with_measured_data_are_all_in_the_shipped_table() -> None:
    from omegaconf import OmegaConf

    shipped = set(sources.load_engine()["device"].unique())
    named = {OmegaConf.load(p).get("measured_as") for p in DEVICES.glob("*.yaml")}
    # every GPU of the table has specs, and every catalogue device names a GPU with specs
    assert shipped <= set(sources.devices()) and named - {None} <= set(sources.devices())
    assert {"RTX4090", "L40S", "A100-SXM-80GB"} <= shipped
