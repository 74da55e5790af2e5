"""Time operators on this machine's GPU, one row per op, in the ops CSV format that the
kernel-time fit reads (``pimbuild-kernels``; docs/gpus.md) (not a test).

    python3 bench/measure_ops.py --out DIR [--dtypes fp32,bf16] [--seconds 240]

Each op is timed between two CUDA events with a busy-wait kernel queued before the start
event, so the events time the GPU's work and not Python's dispatch; what two events read with
nothing between them is subtracted. A row's time is the minimum of ``--repetitions`` runs
after two warm-ups (its median beside it). The shapes are the GPU target's own (LLaMA-7B /
LLaMA-3-8B / GPT-J / Mamba / MMDiT projections, attention batches and vector ops at decode and
prefill token counts) plus a seeded sample of square-ish and skinny shapes. Writes
``ops_<gpu>.csv`` and ``gpu.json`` (name, SMs, L2, clocks, driver, torch) to ``--out``; stops
adding shapes after ``--seconds``.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import subprocess
import time
from pathlib import Path

SLEEP_CYCLES = 200_000
TOKENS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1020, 2048, 4096, 8192]
# (in_features n, out_features k) of the target's projections
PROJECTIONS = [(4096, 4096), (4096, 12288), (4096, 6144), (4096, 1024), (4096, 14336),
               (14336, 4096), (4096, 28672), (4096, 11008), (11008, 4096), (4096, 22016),
               (4096, 16384), (16384, 4096), (2560, 5120), (1536, 3072), (3072, 1536),
               (768, 3072), (3072, 768), (1024, 4096)]
VECTOR = ["add", "mul", "addu", "mulu", "relu", "gelu", "silu", "tanh", "silu_mul",
          "softmax", "layernorm", "rmsnorm"]
WIDTHS = [256, 1024, 2048, 4096, 6144, 11008, 14336, 32000]


def shapes(rng: random.Random) -> list[dict]:
    rows: list[dict] = []
    for m in TOKENS:
        for n, k in PROJECTIONS:
            rows.append({"op": "linear", "b": 1, "m": m, "n": n, "k": k})
    for b in (16, 32, 64, 128, 256, 512):  # attention: (batch x heads) x q x d @ d x kv
        for q, d, kv in ((1, 128, 1024), (1, 128, 4096), (128, 128, 128), (512, 128, 512),
                         (1024, 128, 1024), (1, 64, 2048), (256, 64, 256)):
            rows.append({"op": "bmm", "b": b, "m": q, "n": d, "k": kv})
            rows.append({"op": "bmm", "b": b, "m": q, "n": kv, "k": d})
    for _ in range(160):  # a seeded spread beyond the target's shapes
        m, n, k = (2 ** rng.randint(4, 13) for _ in range(3))
        rows.append({"op": rng.choice(["linear", "bmm"]), "b": rng.choice([1, 4, 16]),
                     "m": m, "n": n, "k": k})
    for op in VECTOR:
        for b in (1, 16, 128, 1020, 4096, 16384):
            for h in WIDTHS:
                rows.append({"op": op, "b": b, "h": h})
    return rows


def neusight_shapes(folder: Path, budget_flops: float = 2e12) -> list[dict]:
    """NeuSight's test dimensions (``dims/test_{linear,bmm,vec}.csv``, ``;``-separated), for a
    set comparable with its measured GPUs; GEMMs above ``budget_flops`` are skipped."""
    rows: list[dict] = []
    for op in ("linear", "bmm"):
        for line in (folder / f"test_{op}.csv").read_text().split():
            b, m, n, k = (int(x) for x in line.split(";"))
            if 2 * b * m * n * k <= budget_flops:
                rows.append({"op": op, "b": b, "m": m, "n": n, "k": k})
    for line in (folder / "test_vec.csv").read_text().split():
        b, h = (int(x) for x in line.split(";"))
        for op in ("add", "mul", "addu", "mulu", "relu", "gelu", "tanh", "softmax",
                   "layernorm"):
            rows.append({"op": op, "b": b, "h": h})
    random.Random(0).shuffle(rows)  # a time limit then cuts a uniform sample
    return rows


def make(op: str, r: dict, dtype, torch):
    """The inputs and a callable for one row."""
    dev = "cuda"
    if op == "linear":
        x = torch.randn(r["b"], r["m"], r["n"], device=dev, dtype=dtype)
        w = torch.randn(r["k"], r["n"], device=dev, dtype=dtype)
        return lambda: torch.nn.functional.linear(x, w)
    if op == "bmm":
        a = torch.randn(r["b"], r["m"], r["n"], device=dev, dtype=dtype)
        c = torch.randn(r["b"], r["n"], r["k"], device=dev, dtype=dtype)
        return lambda: torch.bmm(a, c)
    x = torch.randn(r["b"], r["h"], device=dev, dtype=dtype)
    y = torch.randn(r["b"], r["h"], device=dev, dtype=dtype)
    f = torch.nn.functional
    w = torch.ones(r["h"], device=dev, dtype=dtype)
    return {"add": lambda: x + y, "mul": lambda: x * y, "addu": lambda: x + 0.5,
            "mulu": lambda: x * 0.5, "relu": lambda: f.relu(x), "gelu": lambda: f.gelu(x),
            "silu": lambda: f.silu(x), "tanh": lambda: torch.tanh(x),
            "silu_mul": lambda: f.silu(x) * y,
            "softmax": lambda: torch.softmax(x, -1),
            "layernorm": lambda: f.layer_norm(x, (r["h"],), w, w),
            "rmsnorm": lambda: f.rms_norm(x, (r["h"],), w)}[op]


def timed(fn, torch, repetitions: int) -> list[float]:
    out = []
    for i in range(2 + repetitions):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        fn()
        end.record()
        end.synchronize()
        if i >= 2:
            out.append(start.elapsed_time(end) * 1e3)  # us
    return out


def gpu_facts(torch) -> dict:
    p = torch.cuda.get_device_properties(0)
    facts = {"name": torch.cuda.get_device_name(), "sms": p.multi_processor_count,
             "l2_mb": getattr(p, "L2_cache_size", 0) / 2**20, "torch": torch.__version__,
             "cuda": torch.version.cuda}
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,"
                            "clocks.max.mem,power.limit", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30).stdout.strip()
        facts.update(zip(["driver", "max_sm_mhz", "max_mem_mhz", "power_limit"],
                         [s.strip() for s in q.split(",")], strict=False))
    except (OSError, subprocess.TimeoutExpired) as e:
        facts["nvidia_smi"] = str(e)
    return facts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--repetitions", type=int, default=10)
    ap.add_argument("--seconds", type=float, default=240.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--neusight-dims", type=Path, default=None,
                    help="time NeuSight's test dimensions from this folder instead")
    args = ap.parse_args()
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    facts = gpu_facts(torch)
    floor = min(min(timed(lambda: None, torch, 50)), 5.0)
    facts["event_floor_us"] = floor
    rows = neusight_shapes(args.neusight_dims) if args.neusight_dims \
        else shapes(random.Random(args.seed))
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"ops_{facts['name'].replace(' ', '_')}.csv"
    began = time.perf_counter()
    written = 0
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["op", "dtype", "b", "m", "n", "k", "h", "time_us", "median_us"])
        for i, r in enumerate(rows):
            for name in args.dtypes.split(","):
                if time.perf_counter() - began > args.seconds:
                    break
                try:
                    fn = make(r["op"], r, dtypes[name], torch)
                    t = timed(fn, torch, args.repetitions)
                except torch.cuda.OutOfMemoryError:
                    torch.cuda.empty_cache()
                    continue
                t = sorted(max(0.0, x - floor) for x in t)
                w.writerow([r["op"], name, r.get("b", ""), r.get("m", ""), r.get("n", ""),
                            r.get("k", ""), r.get("h", ""), f"{t[0]:.3f}",
                            f"{t[len(t) // 2]:.3f}"])
                written += 1
            if i % 100 == 0:
                print(f"{i}/{len(rows)} shapes, {written} rows, "
                      f"{time.perf_counter() - began:.0f} s", flush=True)
            torch.cuda.empty_cache()
    facts.update(rows=written, seconds=time.perf_counter() - began,
                 method="min of repetitions after 2 warm-ups, busy-wait before start event, "
                        "event floor subtracted; TF32 off")
    (args.out / "gpu.json").write_text(json.dumps(facts, indent=2) + "\n")
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
