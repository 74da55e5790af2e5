"""The GPU kernel-time model: the ops CSV format, the public data's readers, the fit judged on
a held-out device, the prediction command, kernel-time tables and the profile backends that
read the fit and the tables (docs/gpus.md)."""

from __future__ import annotations

import csv
import gzip
import json
import math
import random
import re
from pathlib import Path

import numpy as np
import pytest

from pimbuild.core.errors import ConfigError
from pimbuild.targets.gpus.kerneltime import cli, evaluate, model, ops, sources, tables
from tests.conftest import artifact_dir, make_cfg

GPU_A = ops.Gpu("A", sms=100, boost_mhz=1500, fp32_tflops=20, tensor_tflops=300,
                mem_gbps=2000, l2_mb=40, tdp_w=400)


def test_op_work_and_key() -> None:
    lin = ops.Op("linear", "bf16", b=2, m=8, n=64, k=32)
    assert lin.work() == (2.0 * 16 * 64 * 32, 2 * (16 * 64 + 64 * 32 + 16 * 32))
    assert lin.family == "gemm" and lin.tensor and not ops.Op("linear", "fp32", 1).tensor
    add = ops.Op("add", "fp32", b=4, h=10)
    assert add.work()[1] == 4 * 3 * 40 and add.family == "elementwise"
    assert ops.Op("sum", "fp32", b=4, h=10).work()[1] == 4 * (40 + 4)
    assert lin.key() == "linear:bf16:2x8x64x32" and add.key() == "add:fp32:4x10"
    # GQA decode over a 1,024-position cache: QK^T and PV, and the KV cache read once
    dec = ops.Op("decode_attention", "bf16", b=4, m=1, n=1024, k=128, h=32, g=8)
    assert dec.work() == (4.0 * 4 * 32 * 128 * 1024, 2 * 4 * 128 * (2 * 32 + 2 * 1024 * 8))
    assert dec.family == "attention" and dec.tensor
    # causal prefill of a 16-token chunk after 112 cached positions: query i sees 113 + i
    pre = ops.Op("prefill_attention", "bf16", b=1, m=16, n=128, k=64, h=8, g=8)
    assert pre.work()[0] == 4.0 * 8 * 64 * sum(113 + i for i in range(16))
    assert pre.key() == "prefill_attention:bf16:1x16x128x64x8x8"


@pytest.mark.parametrize(("row", "message"), [
    ({"op": "conv", "dtype": "fp32", "b": "1"}, "'op' must be 'linear', 'bmm'"),
    ({"op": "add", "dtype": "int8", "b": "1", "h": "2"},
     "'dtype' must be 'fp32', 'fp16' or 'bf16' (got 'int8')"),
    ({"op": "linear", "dtype": "fp32", "b": "1", "m": "-3", "n": "1", "k": "1"},
     "'m' must be >= 1 (got '-3')"),
    ({"op": "linear", "dtype": "fp32", "b": "1", "m": "inf", "n": "1", "k": "1"},
     "'m' must be a whole number (got 'inf')"),
    ({"op": "add", "dtype": "fp32", "b": "1e400", "h": "2"}, "'b' must be a whole number"),
    ({"op": "add", "dtype": "fp32", "b": "nan", "h": "2"}, "'b' must be a whole number"),
    ({"op": "decode_attention", "dtype": "bf16", "b": "8", "m": "2", "n": "1024", "k": "128",
      "h": "32", "g": "8"}, "m = 1 (one token per sequence)"),
    ({"op": "prefill_attention", "dtype": "bf16", "b": "1", "m": "2048", "n": "1024",
      "k": "128", "h": "32", "g": "8"}, "m <= n"),
    ({"op": "prefill_attention", "dtype": "bf16", "b": "1", "m": "16", "n": "1024",
      "k": "128", "h": "32", "g": "5"}, "h a multiple of g"),
    ({"op": "decode_attention", "dtype": "bf16", "b": "1", "m": "1", "n": "1024", "k": "128",
      "h": "32"}, "needs a whole number 'g'"),
    ({"op": "linear", "dtype": "fp32", "b": "1", "m": "2.5", "n": "1", "k": "1"},
     "'m' must be a whole number"),
    ({"op": "softmax", "dtype": "fp16", "b": "4"}, "needs a whole number 'h'"),
])
def test_bad_op_rows_name_the_row(row: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)) as e:
        ops.parse(row, "ops.csv:7")
    assert str(e.value).startswith("ops.csv:7: ")


def test_kernels_map_to_the_ops_that_stand_for_them() -> None:
    """A target kernel (extract's kernels.json) as an op: the contraction's dimensions are
    recovered from its operand sizes and iteration count (B M N K = iterations)."""
    floating = {}
    # q_proj of a decode step: (16 x 4096) @ (4096 x 1024), float32 IR bytes
    lin = {"kind": "contraction", "op": "linalg.generic", "flops": 2 * 16 * 4096 * 1024,
           "iterations": 16 * 4096 * 1024, "reads": {"x": 16 * 4096 * 4, "w": 4096 * 1024 * 4},
           "writes": {"y": 16 * 1024 * 4}}
    assert ops.from_kernel(lin, floating, "bf16") == ops.Op("linear", "bf16", 1, 16, 4096, 1024)
    # GQA scores: 128 (batch x kv heads) x (4 x 128) @ (128 x 1021)
    bmm = {"kind": "contraction", "op": "linalg.generic", "flops": 0,
           "iterations": 128 * 4 * 128 * 1021,
           "reads": {"q": 128 * 4 * 128 * 4, "k": 128 * 128 * 1021 * 4},
           "writes": {"s": 128 * 4 * 1021 * 4}}
    assert ops.from_kernel(bmm, floating, "fp16") == ops.Op("bmm", "fp16", 128, 4, 128, 1021)
    red = {"kind": "reduction", "op": "linalg.generic", "flops": 65536, "iterations": 65536,
           "reads": {"x": 65536 * 4}, "writes": {"m": 16 * 4}}
    assert ops.from_kernel(red, floating, "bf16") == ops.Op("sum", "bf16", b=16, h=4096)
    add = {"kind": "elementwise", "op": "linalg.generic", "flops": 8192, "iterations": 8192,
           "reads": {"a": 8192 * 4, "b": 8192 * 4, "w": 64}, "writes": {"c": 8192 * 4}}
    assert ops.from_kernel(add, floating, "bf16") == ops.Op("add", "bf16", b=2, h=4096)


def write_repo(root: Path) -> None:
    """A NeuSight-shaped and a Vidur-shaped checkout with a few rows each."""
    test = root / "ns" / sources.NEUSIGHT_TEST
    test.mkdir(parents=True)
    (test / "linear.csv").write_text(
        "OPName,Latency,Device,B,M,N,K\n"
        "linear,1.5,NVIDIA L4,1,1024,2560,2560\nlinear,0.5,Tesla T4,1,64,64,64\n"
        "linear,0.5,Unknown GPU,1,64,64,64\n")
    (test / "ln.csv").write_text("OPName,Latency,Device,B,H\nln,0.25,NVIDIA L4,32768,1600\n")
    vid = root / "vd" / sources.VIDUR_COMPUTE / "a40" / "meta-llama" / "Llama-2-7b-hf"
    vid.mkdir(parents=True)
    cols = ["input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
            "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add"]
    head = [f"time_stats.{c}.median" for c in cols] + [
        "n_head", "n_kv_head", "n_embd", "n_expanded_embd", "use_gated_mlp", "num_tokens",
        "num_tensor_parallel_workers"]
    row = [str(0.01 * (i + 1)) for i in range(len(cols))] + ["32", "32", "4096", "11008",
                                                             "True", "8", "2"]
    (vid / "mlp.csv").write_text(",".join(head) + "\n" + ",".join(row) + "\n")


def test_public_data_readers(tmp_path: Path) -> None:
    write_repo(tmp_path)
    ns = list(sources.neusight(tmp_path / "ns"))
    assert [(r["device"], r["op"], r["time_us"]) for r in ns] == [
        ("L4", "linear", 1500.0), ("T4", "linear", 500.0), ("L4", "layernorm", 250.0)]
    vd = list(sources.vidur(tmp_path / "vd"))
    assert len(vd) == 9 and {r["device"] for r in vd} == {"A40"}
    by_op = {r["op"]: r for r in vd if r["op"] != "rmsnorm"}
    # TP 2: the QKV projection's columns and the MLP's are halved
    assert (by_op["linear"]["m"], by_op["silu_mul"]["h"]) == (8, 11008 // 2)
    assert {r["group"] for r in vd} == {"meta-llama/Llama-2-7b-hf|8|2"}
    with pytest.raises(ConfigError, match="is it NeuSight's repository"):
        list(sources.neusight(tmp_path / "vd"))
    with pytest.raises(ConfigError, match="not a folder"):
        list(sources.vidur(tmp_path / "missing"))


def synthetic(rng: random.Random, gpus: dict[str, ops.Gpu]) -> list[dict]:
    """Times from a known law: 4500 cycles + max(waves x flops / (0.6 peak), bytes / (0.75
    bw)), with 5% noise."""
    rows = []
    for name, gpu in gpus.items():
        for _ in range(300):
            if rng.random() < 0.5:
                o = ops.Op("linear", rng.choice(["fp32", "bf16"]), 1,
                           *(2 ** rng.randint(4, 12) for _ in range(3)))
            else:
                o = ops.Op(rng.choice(["add", "relu", "softmax"]), "fp16",
                           b=2 ** rng.randint(0, 12), h=2 ** rng.randint(8, 13))
            t_c, t_m = model.bound(o, gpu)
            t = 4500 / (gpu.boost_mhz * 1e6) + max(ops.waves(o, gpu) * t_c / 0.6, t_m / 0.75)
            rows.append({"source": "ours", "device": name, "group": "", "o": o,
                         "time_us": t * 1e6 * math.exp(rng.gauss(0, 0.05))})
    return rows


def test_fit_recovers_a_known_law_on_a_held_out_device() -> None:
    """Fitted on three devices, the model predicts a fourth it never saw within the noise,
    and never below the spec-sheet bound."""
    gpus = {f"G{i}": ops.Gpu(f"G{i}", sms=40 * (i + 1), boost_mhz=1200 + 200 * i,
                             fp32_tflops=10 * (i + 1), tensor_tflops=100 * (i + 1),
                             mem_gbps=500 * (i + 1), l2_mb=8 * (i + 1), tdp_w=200 + 100 * i)
            for i in range(4)}
    rows = synthetic(random.Random(0), gpus)
    res = evaluate.held_out(rows, gpus, "G2",
                              fit=lambda r, g: model.fit(r, g, rounds=60))
    fitted = evaluate.errors(res["fitted"], res["measured"])
    roof = evaluate.errors(res["roofline"], res["measured"])
    assert fitted["median"] < 0.06 and roof["median"] > 0.2
    floor = np.array([max(model.bound(r["o"], gpus["G2"])) for r in res["rows"]])
    assert (res["fitted"] >= floor * (1 - 1e-9)).all()


def test_pairs_count_kernels_faster_on_the_second_device(monkeypatch) -> None:
    o1, o2 = ops.Op("add", "fp16", 1, h=8), ops.Op("add", "fp16", 2, h=8)
    rows = {d: [{"source": "s", "group": "", "o": o} for o in (o1, o2)] for d in ("A", "B")}
    res = {d: {"rows": rows[d], **{p: np.array(v) for p, v in zip(
        ("measured", "roofline", "physics", "fitted", "chosen"), vals + (vals[-1],),
        strict=True)}}
        for d, vals in (("A", ([1.0, 4.0], [1.0, 1.0], [1, 1], [1.0, 4.0])),
                        ("B", ([2.0, 1.0], [2.0, 2.0], [1, 1], [0.5, 1.0])))}
    monkeypatch.setattr(evaluate, "PAIRS", (("A", "B", "s"),))
    (got,) = evaluate.pairs(res)
    assert got["measured"]["share_by_count"] == 0.5 and got["measured"]["share_by_time"] == 0.8
    assert got["roofline"]["picks_winner"] == 0.5 and got["fitted"]["picks_winner"] == 0.5


def test_shipped_fit_loads_and_is_plausible() -> None:
    """The shipped fit predicts an H200 bf16 GEMM between its spec bound and 3x that, and a
    large fp32 add near the bandwidth bound; its provenance names its data and band."""
    shipped = model.load()
    h200 = sources.devices()["H200-SXM"]
    gemm = ops.Op("linear", "bf16", 1, 4096, 4096, 4096)
    bound = max(model.bound(gemm, h200))
    assert bound <= shipped.seconds(gemm, h200) <= 3 * bound
    add = ops.Op("add", "fp32", 4096, h=16384)
    assert 1.0 <= shipped.seconds(add, h200) / max(model.bound(add, h200)) <= 2.0
    band = shipped.provenance["held_out_error"]
    assert set(band) == {"gemm", "attention", "elementwise", "reduction"}
    for family, b in band.items():  # an 80% band that held-out GPUs' rows bear out
        assert b["low"] < 0 < b["high"] and 0.6 <= b["coverage"] <= 0.95, family
    assert shipped.provenance["data_sha256"] == model.digest(sources.MEASURED)
    assert shipped.provenance["engine_sha256"] == model.digest(sources.ENGINE)
    assert "aiconfigurator: Apache-2.0" in shipped.provenance["sources"]


def test_broken_fit_file_is_one_error(tmp_path: Path) -> None:
    bad = tmp_path / "fit.json"
    bad.write_text('{"physics": {"eff_compute": ')
    with pytest.raises(ConfigError, match="is not a fit pimbuild-kernels wrote"):
        model.load(bad)
    with pytest.raises(ConfigError, match="No such file"):
        model.load(tmp_path / "none.json")


def write_ops(path: Path, rows: list[list]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(ops.COLUMNS)
        w.writerows(rows)
    return path


def test_predict_command(tmp_path: Path, capsys) -> None:
    src = write_ops(tmp_path / "ops.csv", [["linear", "bf16", 1, 16, 4096, 14336, "", ""],
                                           ["linear", "bf16", 1, 16, 4096, 4096, "", ""],
                                           ["softmax", "fp32", 512, "", "", "", 1021, ""],
                                           ["decode_attention", "bf16", 8, 1, 4096, 128, 32,
                                            8]])
    assert cli.main(["predict", str(src), "--device", "l40s"]) == 0
    with (tmp_path / "ops_l40s.csv").open() as f:
        out = list(csv.DictReader(f))
    assert [r["op"] for r in out] == ["linear", "linear", "softmax", "decode_attention"]
    # the L40S is measured: a grid shape, one between grid shapes, one no grid has
    assert [r["from"] for r in out] == ["interpolated", "measured", "predicted", "measured"]
    for r in out:
        assert float(r["low_us"]) < float(r["predicted_us"]) < float(r["high_us"])
        assert float(r["roofline_us"]) > 0 and float(r["time_us"]) > 0
    assert out[2]["time_us"] == out[2]["predicted_us"]
    bad = write_ops(tmp_path / "bad.csv", [["add", "fp32", 4, "", "", "", 8],
                                           ["add", "fp32", -4, "", "", "", 8]])
    assert cli.main(["predict", str(bad), "--device", "l40s"]) == 1
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == (
        f"error: {bad}:3: 'b' must be >= 1 (got '-4')")
    assert not (tmp_path / "bad_l40s.csv").exists()
    assert cli.main(["predict", str(src), "--device", "rtx3090"]) == 1
    assert "unknown device 'rtx3090'" in capsys.readouterr().err
    assert cli.main(["predict", str(src), "--device", "l40s", "--out",
                             str(tmp_path / "no" / "such" / "o.csv")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write ") and "does not exist" in err
    assert not (tmp_path / "no").exists()
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    assert cli.main(["predict", str(empty), "--device", "l40s"]) == 1
    assert "has no ops" in capsys.readouterr().err


def test_a_users_own_device_predicts(tmp_path: Path) -> None:
    (tmp_path / "device").mkdir()
    (tmp_path / "device" / "rtx4090.yaml").write_text(
        "name: RTX-4090\nfp32_tflops: 82.6\nbf16_tflops: 165.2\nmem_gbps: 1008\nl2_mb: 72\n"
        "memory_gb: 24\nlaunch_us: 2\nprice_per_hour: 0.7\nsms: 128\nboost_mhz: 2520\n"
        "tdp_w: 450\n")
    src = write_ops(tmp_path / "ops.csv", [["add", "bf16", 16, "", "", "", 4096]])
    assert cli.main(["predict", str(src), "--device", "rtx4090", "--config-dir",
                             str(tmp_path), "--out", str(tmp_path / "o.csv")]) == 0
    assert (tmp_path / "o.csv").read_text().count("\n") == 2


def test_tables_load_merge_and_refuse(tmp_path: Path) -> None:
    k1 = {"kind": "elementwise", "op": "linalg.generic", "iterations": 8, "flops": 8,
          "reads": {"a": 32}, "writes": {"b": 32}}
    k2 = {**k1, "iterations": 16, "reads": {"a": 64}, "writes": {"b": 64}}
    t1 = tables.make({"device": "A100-80GB-SXM", "torch": "2.11"}, [k1, k2], [1e-6, 2e-6],
                     "bf16")
    t2 = tables.make({"device": "A100-80GB-SXM", "torch": "2.13"}, [k1], [0.5e-6], "bf16")
    merged, repeated = tables.merge([t1, t2], ["t1", "t2"])
    assert repeated == 1 and merged["kernels"][tables.key(k1, "bf16")] == 0.5e-6
    assert tables.versions_differ([t1, t2]) == [
        "kernel-time tables come from different torch versions (2.11, 2.13): their times "
        "may not compare"]
    assert tables.versions_differ([t2], "2.13+cpu") == []
    assert tables.versions_differ([t2], "2.14.0") == [
        "kernel-time tables measured under torch 2.13; this pimbuild runs torch 2.14.0"]
    other = tables.make({"device": "L40S"}, [k1], [1e-6], "bf16")
    with pytest.raises(ConfigError, match="tables of different devices cannot merge"):
        tables.merge([t1, other], ["t1", "other"])
    path = tmp_path / "t.json"
    tables.write(t1, path)
    assert tables.load(path) == t1
    path.write_text(path.read_text()[:40])
    with pytest.raises(ConfigError, match="corrupted or truncated"):
        tables.load(path)
    path.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ConfigError, match="is not a kernel-time table"):
        tables.load(path)


def cpu_table(tmp_path: Path, kernels_json: Path, device: str, torch_version: str,
              precision: str, drop: int = 0) -> Path:
    """A table made by the cuda backend's timing path on the CPU (node times split over the
    kernels), for the catalogue device ``device``; the last ``drop`` kernels left out."""
    from pimbuild.frontend.lower import model_params
    from pimbuild.targets.gpus.program import cuda

    data = json.loads(kernels_json.read_text())
    nodes, _ = cuda.node_times(model_params(make_cfg(tmp_path, ["model=mlp"])), "cpu",
                               repetitions=2, warmup=1)
    from pimbuild.targets.gpus.costmodel import ddg

    graph = ddg.build(data, 1, 0.5)
    seconds = cuda.split(list(graph.kernels), nodes, [1e-6] * len(graph.kernels))
    kernels = data["kernels"][:len(data["kernels"]) - drop]
    table = tables.make({"device": device, "gpu": "CPU stand-in", "torch": torch_version,
                         "method": "test"}, kernels, seconds[:len(kernels)], precision)
    path = tmp_path / f"{device}.json"
    tables.write(table, path)
    return path


def test_plan_from_two_measured_tables(tmp_path: Path, run_build) -> None:
    """Two devices' tables made on 'other machines' (the CPU timing path): the plan reads
    their times, a kernel one table lacks falls back to the fitted model and is counted,
    different torch versions are warned about."""
    gpus = ["system=gpus", "devices=[a100,l40s]", "model=mlp"]
    first = run_build([*gpus, "stages=[profile]", "gpus.backend=fitted"])
    kernels_json = artifact_dir(first, "extract") / "kernels.json"
    n = len(json.loads(kernels_json.read_text())["kernels"])
    a = cpu_table(tmp_path, kernels_json, "A100-80GB-SXM", "2.13.0", "bf16")
    b = cpu_table(tmp_path, kernels_json, "L40S", "2.11.0", "bf16", drop=1)
    result = run_build([*gpus, "gpus.backend=table", f"gpus.tables=[{a},{b}]"])
    info = json.loads((artifact_dir(result, "profile") / "profile.json").read_text())
    assert info["sources"]["a100"]["measured"] == n and info["sources"]["a100"]["predicted"] == 0
    assert info["sources"]["l40s"]["measured"] == n - 1
    assert info["sources"]["l40s"]["predicted"] == 1
    assert any("torch versions" in w for w in info["warnings"])
    with (artifact_dir(result, "profile") / "kernel_times.csv").open() as f:
        got = [float(r["t_a100_s"]) for r in csv.DictReader(f)]
    table = tables.load(a)["kernels"]
    data = json.loads(kernels_json.read_text())["kernels"]
    assert got == [table[tables.key(k, "bf16")] for k in data]
    report = json.loads((artifact_dir(result, "simulate") / "report.json").read_text())
    line = kernel_line(report["summary"])
    assert f"a100 {n}/{n} measured" in line and f"l40s {n - 1}/{n} measured" in line
    md = (artifact_dir(result, "simulate") / "report.md").read_text()
    assert "## Kernel times" in md and f"l40s {n - 1}/{n} measured" in md
    assert info["sources"]["l40s"]["measured_ids"] == list(range(n - 1))
    # a table of another precision covers nothing: every kernel predicted, counted
    c = cpu_table(tmp_path, kernels_json, "A100-80GB-SXM", "2.13.0", "fp32")
    fp32 = run_build([*gpus, "stages=[profile]", "gpus.backend=table",
                      f"gpus.tables=[{c}]"])
    info = json.loads((artifact_dir(fp32, "profile") / "profile.json").read_text())
    assert info["sources"]["a100"]["measured"] == 0 and info["sources"]["l40s"]["table"] is False


def kernel_line(summary: list[str]) -> str:
    (line,) = [s for s in summary if s.startswith("kernel times:")]
    return line


def test_fitted_backend_builds_and_says_so(run_build) -> None:
    result = run_build(["system=gpus", "devices=[h200,l4]", "model=relu",
                        "gpus.backend=fitted"])
    info = json.loads((artifact_dir(result, "profile") / "profile.json").read_text())
    assert info["backend"] == "fitted" and "gemm" in info["band"]
    report = json.loads((artifact_dir(result, "simulate") / "report.json").read_text())
    assert "predicted by the fitted model" in kernel_line(report["summary"])
    holds = report["robust"]["holds"]
    assert report["robust"]["samples"] == 16 and "request distribution" in holds
    assert all(0.0 <= v <= 1.0 for v in holds.values())


def test_export_refuses_a_device_the_build_did_not_measure(tmp_path: Path, run_build,
                                                           capsys) -> None:
    run_build(["system=gpus", "model=relu", "stages=[profile]"])
    assert (tmp_path / "run0" / "manifest.json").is_file()
    code = cli.main(["export", str(tmp_path / "run0"), "--device", "a100", "--out",
                             str(tmp_path / "t.json")])
    assert code == 1 and "did not measure 'a100'" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()


def test_measured_data_file_reads_back(tmp_path: Path) -> None:
    rows = [{"source": "ours", "device": "H200-SXM", "group": "", "op": "add",
             "dtype": "bf16", "b": 2, "h": 8, "time_us": 1.5}]
    path = tmp_path / "m.csv.gz"
    sources.write(rows, path)
    (back,) = sources.load(path)
    assert back["o"] == ops.Op("add", "bf16", b=2, h=8) and back["time_us"] == 1.5
    path.write_bytes(gzip.compress(b"source,device")[:10])
    with pytest.raises(ConfigError, match="cannot read measured ops"):
        sources.load(path)


def test_robust_draws_and_their_note() -> None:
    """A band of zero error draws factors of exactly 1; the note names a speedup that holds
    in too few draws and a baseline ahead only within the error."""
    from pimbuild.targets.gpus.costmodel import robust

    zero = {f: {"log_bias": [0.0], "log_residual": [0.0]}
            for f in ("gemm", "elementwise", "reduction")}
    f = robust.factors(["contraction", "copy", "reduction"], 2, zero, random.Random(0))
    assert f == [[1.0, 1.0]] * 3
    wide = {fam: {"log_bias": [-1.0, 1.0], "log_residual": [0.0]} for fam in zero}
    draws = {tuple(map(tuple, robust.factors(["contraction"], 1, wide, random.Random(s))))
             for s in range(20)}
    assert {d[0][0] for d in draws} == {math.exp(-1), math.exp(1)}
    lines = robust.note({"request distribution": 1.05, "AF": 2.0, "layer pipeline": 0.97},
                        {"request distribution": 0.6, "AF": 1.0, "layer pipeline": 0.3}, 16)
    assert "request distribution 1.05x (holds in 60%)" in lines[0] and "AF" not in lines[0]
    assert "layer pipeline (30%)" in lines[1]
    assert robust.note({"AF": 2.0}, {"AF": 1.0}, 16) == [
        "every comparison with a baseline comes out the same in at least 90% of 16 draws "
        "of the kernel-time model's held-out error"]


def test_a_device_without_the_models_spec_numbers_is_one_error() -> None:
    """A user's device file written before sms / boost_mhz / tdp_w existed (the schema
    leaves them '???'): one error naming what is missing and the way out."""
    spec = {"name": "RTX-4090", "fp32_tflops": 82.6, "bf16_tflops": 165.2, "mem_gbps": 1008,
            "l2_mb": 72, "sms": "???", "boost_mhz": 2520, "tdp_w": 0}
    with pytest.raises(ConfigError, match=r"lacks sms, tdp_w, .*gpus.backend=roofline"):
        ops.gpu_of(spec)
    assert ops.gpu_of({**spec, "sms": 128, "tdp_w": 450}).lanes == pytest.approx(
        82.6e6 / (2 * 128 * 2520))


def test_a_saved_fit_loads_back_with_the_same_predictions(tmp_path: Path) -> None:
    gpus = {"A": GPU_A, "B": ops.Gpu("B", 60, 2000, 30, 120, 300, 48, 72)}
    rows = synthetic(random.Random(1), gpus)
    fitted = model.fit(rows, gpus, rounds=20)
    path = tmp_path / "fit.json"
    model.save(fitted, path, {"note": "test"})
    back = model.load(path)
    assert back.physics == fitted.physics and back.provenance["note"] == "test"
    found = [r["o"] for r in rows[:50]]
    assert np.allclose(back.predict(found, [GPU_A] * 50), fitted.predict(found, [GPU_A] * 50))


def test_a_fit_with_a_number_out_of_range_is_one_error(tmp_path: Path) -> None:
    data = json.loads(model.SHIPPED.read_text())
    for field, value, match in (("floor_cycles", float("nan"), "finite"),
                                ("floor_cycles", True, "must be a number"),
                                ("eff_compute", {"tensor": -0.5}, "must be > 0")):
        bad = tmp_path / "fit.json"
        bad.write_text(json.dumps({**data, "physics": {**data["physics"], field: value}}))
        with pytest.raises(ConfigError, match=match):
            model.load(bad)
