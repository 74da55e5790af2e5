"""The paper's Fig. 6-8 as an engine runs them (not a test): on one pair of GPUs, every system
serves the same trace in ``pimbuild-serve``'s engines: each GPU alone, request distribution
behind each router (a replica per GPU, each with its own queue and memory), PD both ways
round, AF both ways round, the layers split (PP), and kernel-level placement (FluidGPU:
weights replicated, a placement per bucket; ``--selective``: one placement, each GPU holding
only what it runs; ``--whole A``: the first GPU holding every weight beside one placement, so
that a small step runs on it alone). Each serves the trace offline (every request at once:
the most it sustains), arriving at twice the trace's rate, and at the trace's rate (P99 TTFT
and TPOT). A system's offline throughput over the sum of the GPUs' alone is what the ideal
sum credits it with. Then Qwen3-32B, too large for an L40S, on the same pair at the trace's
rate: every system, those that cannot hold it named infeasible. Last, a GPT-oss-20B-like
mixture of experts (``bench/models/gpt-oss-20b-like.json``) under each routing pattern
(balanced, zipf:1.2, router:0), offline and at the trace's rate.

    .venv/bin/python bench/serving_systems.py LLMSERVINGSIM [--devices a100,l40s]
                                              [--repeat 10] [--moe CONFIG.json]
                                              [--out outputs/bench]

The trace and models are LLMServingSim's (github ``casys-kaist/LLMServingSim``, MIT):
``workloads/sharegpt-llama-3.1-8b-300-sps10.jsonl`` repeated ``--repeat`` times,
``configs/model/meta-llama/Llama-3.1-8B.json`` and ``configs/model/Qwen/Qwen3-32B.json``.
Writes ``serving_systems.json``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import write_json  # noqa: E402

from pimbuild.core.errors import ConfigError  # noqa: E402
from pimbuild.targets.gpus.enginesim import cli, replicas, shape  # noqa: E402
from pimbuild.targets.gpus.kerneltime.sources import Repo  # noqa: E402
from pimbuild.targets.gpus.systems import arrivals  # noqa: E402

TRACE = "workloads/sharegpt-llama-3.1-8b-300-sps10.jsonl"
MODEL = "configs/model/meta-llama/Llama-3.1-8B.json"
BIG = "configs/model/Qwen/Qwen3-32B.json"
MOE = Path(__file__).parent / "models" / "gpt-oss-20b-like.json"
ROUTINGS = ("balanced", "zipf:1.2", "router:0")


def systems(a: str, b: str) -> dict[str, dict]:
    """Each system's ``pimbuild-serve`` options."""
    pair, back = f"{a},{b}", f"{b},{a}"
    out: dict[str, dict] = {f"{a} alone": {"device": a}, f"{b} alone": {"device": b}}
    for router in replicas.ROUTERS:
        out[f"request distribution ({router})"] = {"device": pair, "router": router}
    out |= {f"PD, {a} prefills": {"device": pair, "pd": True},
            f"PD, {b} prefills": {"device": back, "pd": True},
            f"AF, attention on {a}": {"device": pair, "af": True},
            f"AF, attention on {b}": {"device": back, "af": True},
            f"layers split, {a} first": {"device": pair, "pp": True},
            f"layers split, {b} first": {"device": back, "pp": True},
            "kernel-level (FluidGPU)": {"device": pair, "placed": True},
            "kernel-level, selective": {"device": pair, "placed": True, "selective": True},
            f"kernel-level, {a} holding every weight": {"device": pair, "placed": True,
                                                        "whole": a}}
    return out


def serve(a: argparse.Namespace, m: shape.LlmShape, requests: list) -> tuple[list, list]:
    """(the requests served, the engines) of one system; a ConfigError where it cannot
    hold the model."""
    served = cli.engines(a, m)
    return cli.serve(a, m, [x.engine for x in served], requests), served


def measure(base: argparse.Namespace, over: dict, m: shape.LlmShape, loads: dict[str, list]
            ) -> dict:
    """One system under each load: tokens/s, and at the trace's rate the latencies."""
    a = argparse.Namespace(**{**vars(base), **over})
    out: dict = {}
    began = time.perf_counter()
    try:
        for load, requests in loads.items():
            seqs, served = serve(a, m, requests)
            out[f"{load}_tokens_per_s"] = replicas.served(seqs)
            if load == "trace_rate":
                out["at_trace_rate"] = cli.summary(cli.simulated(seqs))
    except ConfigError as e:
        return {"infeasible": str(e)}
    out["kv_blocks"] = [x.engine.limits.kv_blocks for x in served]
    out["note"] = served[0].note
    out["wall_s"] = time.perf_counter() - began
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("llmservingsim", type=Path)
    ap.add_argument("--devices", default="a100,l40s")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--moe", type=Path, default=MOE)
    ap.add_argument("--out", type=Path, default=Path("outputs/bench"))
    args = ap.parse_args()
    repo = Repo(args.llmservingsim)
    with tempfile.TemporaryDirectory() as d:
        for name, rel in (("t.jsonl", TRACE), ("llama.json", MODEL), ("qwen.json", BIG)):
            (Path(d) / name).write_text(repo.read(rel) or "")
        trace = arrivals.trace(Path(d) / "t.jsonl")
        models = {"llama": shape.load(Path(d) / "llama.json"),
                  "qwen": shape.load(Path(d) / "qwen.json")}
    span = trace[-1].arrival_s
    timed = [replace(r, arrival_s=r.arrival_s + k * span) for k in range(args.repeat)
             for r in trace]
    # offline: every request at once; twice the trace's rate: past what the pair serves
    loads = {"offline": [replace(r, arrival_s=0.0) for r in timed],
             "twice_rate": [replace(r, arrival_s=r.arrival_s / 2) for r in timed],
             "trace_rate": timed}
    a, b = args.devices.split(",")
    base = cli.parser().parse_args(["--trace", "x", "--model-config", "x", "--device", a])
    out = {"devices": [a, b], "requests": len(timed), "model": MODEL, "systems": {}}
    for label, over in systems(a, b).items():
        r = out["systems"][label] = measure(base, over, models["llama"], loads)
        print(row(label, r), flush=True)
    ideal = sum(out["systems"][f"{n} alone"]["offline_tokens_per_s"] for n in (a, b))
    out["ideal_sum"] = ideal
    print(f"ideal sum of the GPUs alone, offline: {ideal:,.0f} tokens/s")
    out["too_large"] = {"model": BIG, "systems": {}}
    for label, over in systems(a, b).items():
        r = out["too_large"]["systems"][label] = measure(
            base, over, models["qwen"], {"trace_rate": timed})
        print("Qwen3-32B " + row(label, r), flush=True)
    moe = shape.load(args.moe)
    out["moe"] = {"model": str(args.moe), "routing": {}}
    for routing in ROUTINGS:
        got = out["moe"]["routing"][routing] = {}
        for label, over in systems(a, b).items():
            r = got[label] = measure(base, {**over, "routing": routing}, moe,
                                     {"offline": loads["offline"], "trace_rate": timed})
            print(f"{moe.name} ({routing}) " + row(label, r), flush=True)
    write_json(args.out / "serving_systems.json", out)


def row(label: str, r: dict) -> str:
    if "infeasible" in r:
        return f"{label}: infeasible ({r['infeasible']})"
    lat = r["at_trace_rate"]
    return (f"{label}{r['note']}: " + ", ".join(
        f"{k.removesuffix('_tokens_per_s')} {v:,.0f}" for k, v in r.items()
        if k.endswith("_tokens_per_s")) + f" tokens/s; KV blocks {r['kv_blocks']}; at the "
        f"trace's rate TTFT P99 {lat['ttft']['p99']:,.0f} ms, TPOT P99 "
        f"{lat['tpot']['p99']:.1f} ms ({r['wall_s']:.1f} s)")


if __name__ == "__main__":
    main()
