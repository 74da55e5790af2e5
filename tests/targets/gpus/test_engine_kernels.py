"""Engine kernels (``gpus.kernels=engine``: the lowered kernels grouped as a serving engine
launches them), the measured grids they are looked up in, and the public data those grids
come from (docs/gpus.md)."""

from __future__ import annotations

import json
import math
import zipfile
from pathlib import Path

import pytest

from pimbuild.core.errors import ConfigError
from pimbuild.targets.gpus.kerneltime import cli, grid, ops, sources
from pimbuild.targets.gpus.program import fusion
from tests.conftest import artifact_dir
from tests.targets.gpus.test_kernel_sources import write_lss

SMALL = ["system=gpus", "model=llama3_8b", "model.size.hidden=256", "model.size.heads=4",
         "model.size.kv_heads=2", "model.size.ffn=512", "model.size.batch=4",
         "model.size.kv_len=60", "model.size.layers=2"]


def engine_ops(kernels: list[dict]) -> list[str]:
    return [k.get("engine_op", {}).get("op", k["op"]) for k in kernels]


@pytest.mark.slow
def test_a_llama_decode_layer_is_the_ten_kernels_vllm_launches(run_build) -> None:
    result = run_build([*SMALL, "stages=[extract]"])
    data = json.loads((artifact_dir(result, "extract") / "kernels.json").read_text())
    kernels = data["kernels"]
    assert engine_ops(kernels) == ["rmsnorm", "linear", "rope", "decode_attention",
                                   "linalg.generic", "add_rmsnorm", "linear", "silu_mul",
                                   "linalg.generic", "add"]
    # q, k and v as one GEMM of 4 + 2 * 2 heads of 64; gate and up as one of 2 x 512
    assert kernels[1]["engine_op"] == {"op": "linear", "b": 1, "m": 4, "n": 256, "k": 512}
    assert kernels[6]["engine_op"] == {"op": "linear", "b": 1, "m": 4, "n": 256, "k": 1024}
    assert kernels[3]["engine_op"] == {"op": "decode_attention", "b": 4, "m": 1, "n": 61,
                                       "k": 64, "h": 4, "g": 2}
    # AF's split sees QKV, RoPE and attention as attention's (their module), the MLP not
    assert [k["source_module"] for k in kernels[1:5]] == ["self_attn"] * 3 + [
        "self_attn.o_proj"]
    assert "attn" not in kernels[6]["source_module"]
    # every lowered kernel belongs to exactly one engine kernel
    members = sorted(i for k in kernels for i in k["members"])
    assert members == list(range(len(data["lowered"])))
    assert sum(k["flops"] for k in kernels) == sum(k["flops"] for k in data["lowered"])
    lowered = run_build([*SMALL, "gpus.kernels=lowered", "stages=[extract]"])
    flat = json.loads((artifact_dir(lowered, "extract") / "kernels.json").read_text())
    assert "lowered" not in flat and len(flat["kernels"]) == len(data["lowered"])
    assert artifact_dir(lowered, "extract") != artifact_dir(result, "extract")


@pytest.mark.slow
def test_a_prompt_is_causal_prefill_attention(run_build) -> None:
    result = run_build(["system=gpus", "model=llama3_8b_prefill", "model.size.hidden=256",
                        "model.size.heads=4", "model.size.kv_heads=2", "model.size.ffn=512",
                        "model.size.tokens=32", "model.size.layers=2", "stages=[extract]"])
    kernels = json.loads((artifact_dir(result, "extract") / "kernels.json").read_text())[
        "kernels"]
    (att,) = [k["engine_op"] for k in kernels if "attention" in k["op"]]
    assert att == {"op": "prefill_attention", "b": 1, "m": 32, "n": 32, "k": 64, "h": 4,
                   "g": 2}


def _k(i: int, kind: str, reads: dict, writes: dict, flops: int = 0, it: int = 1) -> dict:
    return {"id": i, "op": "linalg.generic", "kind": kind, "flops": flops, "iterations": it,
            "reads": reads, "writes": writes}


def test_attention_that_does_not_divide_stays_lowered() -> None:
    """Two activation contractions with a softmax between them, but sizes no batch of heads
    explains: no attention group; the two GEMMs reading one activation still merge."""
    data = {"buffers": {"arg0": {"bytes": 4 * 60, "role": "input"},
                        "arg1": {"bytes": 4 * 60 * 7, "role": "parameter"},
                        "arg2": {"bytes": 4 * 60 * 7, "role": "parameter"}},
            "outputs": ["k4.0"],
            "kernels": [_k(0, "contraction", {"arg0": 240, "arg1": 1680}, {"k0.0": 28}),
                        _k(1, "contraction", {"arg0": 240, "arg2": 1680}, {"k1.0": 28}),
                        _k(2, "contraction", {"k0.0": 28, "k1.0": 28}, {"k2.0": 196},
                           it=7 * 7 * 5),
                        _k(3, "reduction", {"k2.0": 196}, {"k3.0": 196}),
                        _k(4, "contraction", {"k3.0": 196, "k1.0": 28}, {"k4.0": 28},
                           it=7 * 7 * 3)]}
    signature = {"args": [{"kind": "input", "shape": [3, 1, 60]}]}
    out = fusion.engine(data, signature)
    assert [k["members"] for k in out["kernels"]] == [[0, 1], [2], [3], [4]]
    assert out["kernels"][0]["engine_op"]["op"] == "linear"
    assert fusion.lowered_place(out, [1, 0, 0, 1, 0, 1, 1, 0]) == [1, 1, 0, 0, 1, 0, 0, 1,
                                                                    1, 0]


def power_law_grid(exps: tuple[float, float, float] = (0.5, 0.3, 0.2)) -> grid.Grid:
    g = grid.Grid()
    for m in (1, 4, 16, 64):
        for n in (64, 256, 1024):
            for k in (64, 256):
                g.add(ops.Op("linear", "bf16", 1, m, n, k),
                      1e-6 * m ** exps[0] * n ** exps[1] * k ** exps[2])
    return g


def test_grid_measures_interpolates_and_refuses() -> None:
    g = power_law_grid()
    t, how = g.lookup(ops.Op("linear", "bf16", 1, 16, 256, 64))
    assert how == "measured" and t == pytest.approx(1e-6 * 16 ** 0.5 * 256 ** 0.3 * 64 ** 0.2)
    # between grid points a power law is exact in log-log
    t, how = g.lookup(ops.Op("linear", "bf16", 1, 8, 512, 100))
    assert how == "interpolated"
    assert t == pytest.approx(1e-6 * 8 ** 0.5 * 512 ** 0.3 * 100 ** 0.2)
    # a batched linear's rows are b * m
    assert g.lookup(ops.Op("linear", "bf16", 4, 4, 256, 64))[1] == "measured"
    assert g.lookup(ops.Op("linear", "bf16", 1, 128, 256, 64)) is None  # past the grid
    assert g.lookup(ops.Op("linear", "fp16", 1, 16, 256, 64)) is None  # another dtype
    assert g.lookup(ops.Op("bmm", "bf16", 2, 16, 256, 64)) is None  # an op grids lack
    assert g.lookup(ops.Op("add", "bf16", 2, h=8)) is None
    del g.times["linear"][("bf16",)][(4, 256, 64)]
    g.axes.clear()
    assert g.lookup(ops.Op("linear", "bf16", 1, 8, 300, 64)) is None  # a corner missing
    held = {r["dimension"]: r for r in grid.held_out(power_law_grid())}
    assert set(held) == {"m", "n"}  # k has no interior grid value to drop
    assert held["m"]["median"] == pytest.approx(0, abs=1e-9) and held["m"]["rows"] == 2 * 3 * 2


def test_grid_spans_a_wide_gap_only_so_far() -> None:
    g = grid.Grid()
    for m in (1, 1024):
        g.add(ops.Op("linear", "bf16", 1, m, 64, 64), 1e-6 * m)
    assert g.lookup(ops.Op("linear", "bf16", 1, 32, 64, 64)) is None


def write_aic(root: Path, gemm_rows: list[dict], gpu: str = "l40s",
              framework: str = "vllm") -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    base = root / sources.AIC_ROOT / gpu
    (base / "gemm" / framework / "0.24.0").mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(gemm_rows),
                   base / "gemm" / framework / "0.24.0" / "gemm_perf.parquet")
    att = base / "attention" / framework / "0.24.0"
    att.mkdir(parents=True, exist_ok=True)
    common = {"batch_size": 8, "num_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
              "kv_cache_dtype": "bfloat16", "attn_dtype": "bfloat16", "window_size": 0,
              "kernel_source": "fa2"}
    pq.write_table(pa.Table.from_pylist([{**common, "isl": 1, "step": 1023, "latency": 0.03},
                                         {**common, "isl": 1, "step": 1023, "latency": 0.02,
                                          "window_size": 128}]),
                   att / "generation_attention_perf.parquet")
    pq.write_table(pa.Table.from_pylist([{**common, "isl": 512, "step": 0, "latency": 0.1}]),
                   att / "context_attention_perf.parquet")
    return root


GEMM = [{"m": 16, "n": 6144, "k": 4096, "gemm_dtype": "bfloat16", "kernel_source": "cublas",
         "latency": 0.02},
        {"m": 16, "n": 6144, "k": 4096, "gemm_dtype": "bfloat16", "kernel_source": "other",
         "latency": 0.03},  # the same shape by a slower kernel: the least time is kept
        {"m": 32, "n": 6144, "k": 4096, "gemm_dtype": "bfloat16", "kernel_source": "cublas",
         "latency": float("nan")},
        {"m": 64, "n": 6144, "k": 4096, "gemm_dtype": "bfloat16", "kernel_source": "cublas",
         "latency": -1.0},
        {"m": 16, "n": 6144, "k": 4096, "gemm_dtype": "fp8", "kernel_source": "cutlass",
         "latency": 0.01}]


def test_aiconfigurator_reader_keeps_sound_bf16_rows(tmp_path: Path) -> None:
    root = write_aic(tmp_path / "aic", GEMM)
    write_aic(root, GEMM, gpu="some_future_gpu")  # not a GPU pimbuild knows: skipped
    write_aic(root, GEMM, framework="sglang")  # another engine's: skipped
    rows = list(sources.aiconfigurator(root))
    by = {r["op"]: r for r in rows}
    assert len(rows) == 3 and {r["device"] for r in rows} == {"L40S"}
    assert by["linear"]["time_us"] == pytest.approx(20.0) and by["linear"]["kernel"] == "cublas"
    assert (by["linear"]["m"], by["linear"]["n"], by["linear"]["k"]) == (16, 4096, 6144)
    assert (by["decode_attention"]["n"], by["decode_attention"]["g"]) == (1024, 8)
    assert by["prefill_attention"]["m"] == by["prefill_attention"]["n"] == 512
    assert {r["framework"] for r in rows} == {"vllm"} and rows[0]["version"] == "0.24.0"
    # the same from the wheel (a zip of that tree)
    wheel = tmp_path / "aiconfigurator_core-0.12.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for f in root.rglob("*.parquet"):
            z.write(f, str(f.relative_to(root)))
    assert len(list(sources.aiconfigurator(wheel))) == 3
    out = tmp_path / "engine.parquet"
    sources.write_engine(rows, out)
    frame = sources.load_engine(out)
    assert len(frame) == 3 and set(sources.ENGINE_COLUMNS) <= set(frame.columns)
    g = grid.build(frame)["L40S"]
    assert g.lookup(ops.Op("linear", "bf16", 1, 16, 4096, 6144)) == (pytest.approx(2e-5),
                                                                     "measured")


def test_aiconfigurator_bad_input_is_one_error(tmp_path: Path, capsys) -> None:
    root = write_aic(tmp_path / "aic", [{"m": 1, "n": 2, "latency": 0.1}])
    with pytest.raises(ConfigError, match=r"gemm_perf.parquet lacks the column\(s\) "
                                          r"gemm_dtype, k, kernel_source"):
        list(sources.aiconfigurator(root))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="holds no"):
        list(sources.aiconfigurator(tmp_path / "empty"))
    broken = write_aic(tmp_path / "broken", GEMM)
    next(broken.rglob("gemm_perf.parquet")).write_bytes(b"PAR1 not really")
    with pytest.raises(ConfigError, match="not a readable Parquet file"):
        list(sources.aiconfigurator(broken))
    out = tmp_path / "e.parquet"
    lss = write_lss(tmp_path / "lss")
    assert cli.main(["data", "--aiconfigurator", str(broken), "--llmservingsim", str(lss),
                     "--engine-out", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "not a readable Parquet" in err and not out.exists()
    assert cli.main(["data"]) == 1
    assert "name a source" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="cannot read engine kernel times"):
        sources.load_engine(tmp_path / "none.parquet")


def test_fit_never_writes_over_the_shipped_model_unless_told(tmp_path: Path, capsys,
                                                             monkeypatch) -> None:
    args = cli.parser().parse_args(["fit"])
    assert args.out == Path("kernel_model.json")
    assert cli.main(["fit", "--exclude", "NoSuchGPU"]) == 1
    assert "unknown measured GPU(s) NoSuchGPU" in capsys.readouterr().err
    assert cli.main(["fit", "--out", str(tmp_path / "no" / "fit.json")]) == 1
    assert "does not exist" in capsys.readouterr().err


def test_attention_op_costs_follow_the_kv_cache() -> None:
    """Decode attention reads the whole KV cache: its bytes double with the cache."""
    short = ops.Op("decode_attention", "bf16", 8, 1, 1024, 128, 32, 8)
    long = ops.Op("decode_attention", "bf16", 8, 1, 2048, 128, 32, 8)
    assert long.work()[1] / short.work()[1] == pytest.approx(2, rel=0.01)
    assert math.isclose(long.work()[0], 2 * short.work()[0])


def test_a_fit_cites_only_the_sources_it_used() -> None:
    rows = [{"source": "aiconfigurator"}, {"source": "vidur"}, {"source": "aiconfigurator"}]
    assert sources.cited(rows) == (f"aiconfigurator: {sources.LICENCES['aiconfigurator']}; "
                                   f"vidur: {sources.LICENCES['vidur']}")
    assert "ours" not in sources.cited([r for r in rows if r["source"] != "ours"])


def test_the_report_says_what_was_measured_and_for_which_precision() -> None:
    from pimbuild.targets.gpus.report import kernel_times_lines

    counts = {"measured": 2, "interpolated": 3, "predicted": 5, "measured_time_share": 0.16,
              "interpolated_time_share": 0.76, "predicted_time_share": 0.08}
    kt = {"backend": "auto", "precision": "fp32", "band": {},
          "sources": {"a100": {"grid": "A100-SXM-80GB", "grid_dtypes": ["bf16"],
                               "raised_to_dram": 0, **counts},
                      "mine": {"grid": None, "grid_dtypes": [], "raised_to_dram": 0,
                               **counts}}}
    lines = kernel_times_lines(kt)
    assert lines[0].startswith("kernel times: a100 (A100-SXM-80GB): 2/10 measured (16% of "
                               "its time), 3 interpolated (76%); mine: no measured data")
    assert "a100's measurements are bf16 only: this build's fp32 kernels are predicted" in lines
    kt["sources"]["a100"]["raised_to_dram"] = 2
    assert "a100 2 kernel(s)" in kernel_times_lines({**kt, "precision": "bf16"})[-1]


@pytest.mark.slow
def test_the_default_backend_measures_what_the_data_hold(run_build) -> None:
    result = run_build([*SMALL, "devices=[a100,l40s,l4]", "stages=[profile]"])
    info = json.loads((artifact_dir(result, "profile") / "profile.json").read_text())
    assert info["backend"] == "auto"
    for key in ("a100", "l40s"):
        v = info["sources"][key]
        assert v["measured"] + v["interpolated"] + v["predicted"] == 10
        assert v["measured"] >= 2  # the QKV and gate+up GEMMs are grid shapes
        assert sum(v[f"{k}_time_share"] for k in ("measured", "interpolated", "predicted")) \
            == pytest.approx(1)
    assert info["sources"]["l4"]["grid"] is None  # NeuSight's fp32 rows make no grid
    assert info["sources"]["l4"]["predicted"] == 10
    fp32 = run_build([*SMALL, "devices=[a100,l40s]", "gpus.precision=fp32",
                      "stages=[profile]"])
    info = json.loads((artifact_dir(fp32, "profile") / "profile.json").read_text())
    assert info["sources"]["a100"]["predicted"] == 10
