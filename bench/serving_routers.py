"""Request distribution and PD as they run, against the ideal sum request distribution is
usually credited with (not a test): each GPU alone serves a trace offline (every request at
once: the most it sustains); then replicas of the model on every GPU, one engine each with
its own queue and memory, serve the same trace behind each router (``pimbuild-serve``'s
engines), offline and arriving at twice the trace's rate. The ratio of a router's
throughput to the sum of the GPUs' alone is the imbalance the sum hides. Then PD both ways
round (rdma200 between the GPUs) and each GPU alone, on the same trace. Last, Qwen3-32B,
too large for an L40S, on the same pair at the trace's rate: every system, those that cannot
hold it named infeasible, and the model's layers split over both.

    .venv/bin/python bench/serving_routers.py LLMSERVINGSIM [--devices a100,l40s]
                                              [--repeat 10] [--out outputs/bench]

The trace and model are LLMServingSim's (github ``casys-kaist/LLMServingSim``, MIT):
``workloads/sharegpt-llama-3.1-8b-300-sps10.jsonl`` repeated ``--repeat`` times, and
``configs/model/meta-llama/Llama-3.1-8B.json``. Writes ``serving_routers.json``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import write_json  # noqa: E402

from pimbuild.targets.gpus import arrivals  # noqa: E402
from pimbuild.targets.gpus.enginesim import cli, disagg, replicas, scheduler, shape  # noqa: E402
from pimbuild.targets.gpus.enginesim.steps import Steps  # noqa: E402
from pimbuild.targets.gpus.kerneltime import clock  # noqa: E402
from pimbuild.targets.gpus.kerneltime.sources import Repo  # noqa: E402

TRACE = "workloads/sharegpt-llama-3.1-8b-300-sps10.jsonl"
MODEL = "configs/model/meta-llama/Llama-3.1-8B.json"
BIG = "configs/model/Qwen/Qwen3-32B.json"


def engine(name: str, m: shape.LlmShape, role: str = "both") -> scheduler.Engine:
    kernels, spec = clock.clock(name)
    blocks = cli.memory(spec, name, 0.9).kv_blocks(m, 16, 2048, 256)
    return scheduler.Engine(Steps(m, kernels.seconds), scheduler.Limits(kv_blocks=blocks),
                            name, role)


def pd(reqs: list, first: str, second: str, m: shape.LlmShape) -> list:
    return disagg.serve(reqs, engine(first, m, "prefill"), engine(second, m, "decode"),
                        cli.link("rdma200"), m.kv_bytes_per_token)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("llmservingsim", type=Path)
    ap.add_argument("--devices", default="a100,l40s")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--out", type=Path, default=Path("outputs/bench"))
    args = ap.parse_args()
    repo = Repo(args.llmservingsim)
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "t.jsonl").write_text(repo.read(TRACE) or "")
        (Path(d) / "c.json").write_text(repo.read(MODEL) or "")
        trace = arrivals.trace(Path(d) / "t.jsonl")
        m = shape.load(Path(d) / "c.json")
    span = trace[-1].arrival_s
    timed = [replace(r, arrival_s=r.arrival_s + k * span) for k in range(args.repeat)
             for r in trace]
    offline = [replace(r, arrival_s=0.0) for r in timed]
    # arriving twice as fast as the trace: past what the pair serves, the queues build
    fast = [replace(r, arrival_s=r.arrival_s / 2) for r in timed]
    names = args.devices.split(",")
    out = {"devices": names, "requests": len(timed), "alone": {}, "routers": {}}
    for name in names:
        out["alone"][name] = replicas.throughput([scheduler.simulate(
            offline, engine(name, m).steps, engine(name, m).limits)])
    ideal = sum(out["alone"].values())
    out["ideal_sum"] = ideal
    print(f"{len(timed)} requests; alone, offline (output tokens/s): "
          + ", ".join(f"{n} {t:,.0f}" for n, t in out["alone"].items())
          + f"; ideal sum {ideal:,.0f}")
    for router in replicas.ROUTERS:
        runs = replicas.distribute(offline, [engine(n, m) for n in names], router)
        got = replicas.throughput(runs)
        busy = replicas.throughput(replicas.distribute(fast, [engine(n, m) for n in names],
                                                       router))
        live = replicas.distribute(timed, [engine(n, m) for n in names], router)
        lat = cli.summary(cli.simulated([s for r in live for s in r.seqs]))
        out["routers"][router] = {
            "offline_tokens_per_s": got, "of_ideal_sum": got / ideal,
            "twice_the_rate_tokens_per_s": busy, "twice_the_rate_of_ideal_sum": busy / ideal,
            "requests": {n: len(r_.seqs) for n, r_ in zip(names, runs, strict=True)},
            "at_trace_rate": lat}
        print(f"{router}: {got:,.0f} tokens/s offline = {got / ideal:.1%} of the ideal sum "
              f"(requests " + ", ".join(f"{n} {len(r_.seqs)}" for n, r_ in
                                        zip(names, runs, strict=True))
              + f"); arriving at twice the trace's rate {busy:,.0f} = {busy / ideal:.1%}; "
              f"at the trace's rate TTFT P99 {lat['ttft']['p99']:,.0f} ms, "
              f"TPOT P99 {lat['tpot']['p99']:.1f} ms")
    out["pd"] = {}
    for first, second in (names, names[::-1]):
        got = replicas.served(pd(offline, first, second, m))
        busy = replicas.served(pd(fast, first, second, m))
        lat = cli.summary(cli.simulated(pd(timed, first, second, m)))
        out["pd"][f"{first} prefills, {second} decodes"] = {
            "offline_tokens_per_s": got, "of_ideal_sum": got / ideal,
            "twice_the_rate_of_ideal_sum": busy / ideal, "at_trace_rate": lat}
        print(f"PD, {first} prefills, {second} decodes (rdma200): {got:,.0f} tokens/s offline "
              f"= {got / ideal:.1%}; twice the rate {busy / ideal:.1%}; at the trace's rate "
              f"TTFT P99 {lat['ttft']['p99']:,.0f} ms, TPOT P99 {lat['tpot']['p99']:.1f} ms")
    out["alone_at_trace_rate"] = {}
    for name in names:
        e = engine(name, m)
        lat = cli.summary(cli.simulated(scheduler.simulate(timed, e.steps, e.limits).seqs))
        out["alone_at_trace_rate"][name] = lat
        print(f"{name} alone at the trace's rate: TTFT P99 {lat['ttft']['p99']:,.0f} ms, "
              f"TPOT P99 {lat['tpot']['p99']:.1f} ms")
    out["too_large"] = too_large(repo, timed, names)
    write_json(args.out / "serving_routers.json", out)


def too_large(repo: Repo, timed: list, names: list[str]) -> dict:
    """Qwen3-32B (65 GB of weights: more than an L40S holds) on the pair: every system, the
    ones that cannot hold it named infeasible."""
    from pimbuild.errors import ConfigError

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "Qwen3-32B.json").write_text(repo.read(BIG) or "")
        m = shape.load(Path(d) / "Qwen3-32B.json")
    out: dict = {"model": BIG}
    args = cli.parser().parse_args(["--trace", "x", "--model-config", "x", "--device",
                                    ",".join(names)])
    systems = {f"{n} alone": {"device": n} for n in names}
    systems["request distribution (lot)"] = {"device": ",".join(names), "router": "lot"}
    systems[f"PD, {names[1]} prefills"] = {"device": ",".join(names[::-1]), "pd": True}
    systems[f"PD, {names[0]} prefills"] = {"device": ",".join(names), "pd": True}
    systems[f"layers split, {names[0]} first"] = {"device": ",".join(names), "pp": True}
    systems[f"layers split, {names[1]} first"] = {"device": ",".join(names[::-1]), "pp": True}
    for label, over in systems.items():
        a = argparse.Namespace(**{**vars(args), **over})
        try:
            served = cli.engines(a, m)
        except ConfigError as e:
            out[label] = {"infeasible": str(e)}
            print(f"{label}: infeasible ({e})")
            continue
        engs = [x.engine for x in served]
        if a.pd:
            seqs = disagg.serve(timed, *engs, cli.link("rdma200"), m.kv_bytes_per_token)
        elif len(engs) > 1:
            seqs = [s for r in replicas.distribute(timed, engs, a.router) for s in r.seqs]
        else:
            seqs = scheduler.serve(timed, engs[0]).seqs
        lat = cli.summary(cli.simulated(seqs))
        out[label] = {"tokens_per_s": replicas.served(seqs), "kv_blocks":
                      [e.limits.kv_blocks for e in engs], "note": served[0].note,
                      "at_trace_rate": lat}
        print(f"{label}{served[0].note}: {replicas.served(seqs):,.0f} tokens/s, KV blocks "
              f"{[e.limits.kv_blocks for e in engs]}, TTFT P99 {lat['ttft']['p99']:,.0f} ms, "
              f"TPOT P99 {lat['tpot']['p99']:.1f} ms")
    return out


if __name__ == "__main__":
    main()
