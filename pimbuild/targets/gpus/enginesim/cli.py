"""``pimbuild-serve``: serve a request trace on one GPU as vLLM would, with step times from the
GPU's engine-kernel times (measured where the shipped data hold them), and compare with a
measured vLLM run (docs/gpus.md, "Serving as an engine runs it").

    pimbuild-serve --trace REQUESTS.jsonl --model-config config.json --device rtx4090
                   [--synthetic N,RATE,PROMPT,OUTPUT[,SIGMA] --seed 0] (instead of --trace)
                   [--device a100,l40s --router jsq|lot|round_robin] [--offline]
                   [--device a100,l40s --pd|--pp|--placed|--af --link rdma200]
                   [--depth 2] [--buckets 1,2,4,8,...] [--selective | --whole a100]
                   [--store outputs/artifacts]
                   [--routing balanced|zipf:S|router:SEED] (a mixture of experts)
                   [--config-dir DIR] [--max-num-seqs 256] [--max-num-batched-tokens 2048]
                   [--block-size 16] [--gpu-memory-utilization 0.9] [--kv-blocks N]
                   [--measured VLLM_REQUESTS.jsonl] [--json OUT]

Several devices are request distribution: one replica of the model per GPU, each with its
own queue, batch and memory, behind ``--router`` (``replicas``); with ``--pd`` the first
prefills and the second decodes, the KV caches crossing ``--link`` (``disagg``); with
``--pp`` one engine runs the model's layers split over the two (``pipeline``); with
``--placed`` one engine runs every step's kernels placed over the two by FluidGPU's
throughput planner, a placement per token bucket (``placed``), and with ``--af`` attention's
kernels on the first and the rest on the second (AF disaggregation, in the same engine).
``--kv-blocks`` gives the KV-cache size vLLM reported at start-up (its ``num_gpu_blocks``);
without it the blocks come from the device's memory (``shape.Memory``). ``--measured`` reads
vLLM's per-request records (``input_toks, output_toks, queued_ts, first_token_ts,
last_token_ts``, as LLMServingSim's examples hold them) and prints them beside the
simulation. Bad input is one ``error:`` line and exit 1, with nothing written.
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pimbuild.core.artifacts import Store
from pimbuild.core.errors import ConfigError
from pimbuild.targets.gpus.costmodel.cost import Link
from pimbuild.targets.gpus.enginesim import disagg, pipeline, placed, replicas, scheduler, shape
from pimbuild.targets.gpus.enginesim.routing import Routing
from pimbuild.targets.gpus.enginesim.steps import Steps
from pimbuild.targets.gpus.kerneltime import clock
from pimbuild.targets.gpus.systems import arrivals
from pimbuild.targets.gpus.systems.engine import percentile

METRICS = ("ttft", "tpot", "latency")
TWO = ("pd", "pp", "placed", "af")  # the systems of two devices in one
DEPTH = 2  # --depth's default
STATS = ("mean", "p50", "p90", "p99")


def summary(per: dict[str, list[float]]) -> dict[str, dict[str, float]]:
    """Mean and percentiles (nearest rank) of each metric, in milliseconds."""
    out = {}
    for k, values in per.items():
        v = sorted(x * 1e3 for x in values)
        out[k] = {"mean": sum(v) / len(v) if v else 0.0,
                  **{f"p{q}": percentile(v, q) for q in (50, 90, 99)}}
    return out


def simulated(done: list[scheduler.Seq]) -> dict[str, list[float]]:
    return {"ttft": [s.first_s - s.req.arrival_s for s in done],
            "tpot": [(s.finish_s - s.first_s) / (s.req.output_tokens - 1) for s in done
                     if s.req.output_tokens > 1],
            "latency": [s.finish_s - s.req.arrival_s for s in done]}


def measured(path: Path) -> dict[str, list[float]]:
    """vLLM's per-request records: times from queueing, TPOT over the tokens after the first."""
    per: dict[str, list[float]] = {k: [] for k in METRICS}
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read measured requests {path}: {e}") from None
    for i, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            r = json.loads(raw)
            q, first, last = (float(r[k]) for k in ("queued_ts", "first_token_ts",
                                                     "last_token_ts"))
            out = int(r["output_toks"])
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"{path}:{i}: not a vLLM request record ({e})") from None
        per["ttft"].append(first - q)
        per["latency"].append(last - q)
        if out > 1:
            per["tpot"].append((last - first) / (out - 1))
    if not per["ttft"]:
        raise ConfigError(f"{path} holds no request records")
    return per


def check(args: argparse.Namespace) -> None:
    """The engine settings' bounds."""
    for option in ("max_num_seqs", "max_num_batched_tokens", "block_size"):
        if getattr(args, option) < 1:
            raise ConfigError(f"--{option.replace('_', '-')} must be >= 1")
    if not 0 < args.gpu_memory_utilization <= 1:
        raise ConfigError("--gpu-memory-utilization must be in (0, 1]")
    if args.kv_blocks is not None and args.kv_blocks < 1:
        raise ConfigError("--kv-blocks must be >= 1")


def memory(spec: dict[str, Any], name: str, utilisation: float) -> shape.Memory:
    """Device ``name``'s memory; a GPU's "GB" are GiB (a 24 GB RTX 4090 holds 24 x 2^30
    bytes of GDDR6X)."""
    memory_gb = spec.get("memory_gb")
    if not isinstance(memory_gb, (int, float)) or memory_gb <= 0:
        raise ConfigError(f"device '{name}' has no memory_gb")
    return shape.Memory(memory_gb * 2**30, utilisation)


def limits(args: argparse.Namespace, m: shape.LlmShape, spec: dict[str, Any], name: str
           ) -> tuple[scheduler.Limits, int]:
    """The engine's limits and the KV blocks the memory model gives."""
    check(args)
    try:
        modelled = memory(spec, name, args.gpu_memory_utilization).kv_blocks(
            m, args.block_size, args.max_num_batched_tokens, args.max_num_seqs)
    except ConfigError:
        if args.kv_blocks is None:  # no block count of vLLM's to serve with instead
            raise
        modelled = 0
    return scheduler.Limits(args.max_num_seqs, args.max_num_batched_tokens, args.block_size,
                            args.kv_blocks or modelled), modelled


def table(sim: dict, ref: dict | None) -> str:
    lines = ["| metric (ms) | simulated | vLLM measured | difference |", "|---|---:|---:|---:|"]
    for k in METRICS:
        for q in STATS:
            s = sim[k][q]
            r = ref[k][q] if ref else None
            diff = f"{s / r - 1:+.1%}" if r else ""
            lines.append(f"| {k.upper()} {q} | {s:,.1f} | "
                         f"{'' if r is None else f'{r:,.1f}'} | {diff} |")
    return "\n".join(lines)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="pimbuild-serve", description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", type=Path,
                    help="requests: a CSV or JSON-lines trace (or --synthetic)")
    ap.add_argument("--synthetic", metavar="N,RATE,PROMPT,OUTPUT[,SIGMA]",
                    help="N Poisson requests at RATE per second, prompt and output lengths "
                         "log-normal with these means and log spread SIGMA (default 0.8)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model-config", type=Path, required=True,
                    help="the model's Hugging Face config.json")
    ap.add_argument("--device", required=True,
                    help="a catalogue GPU; several, comma-separated: one replica each")
    ap.add_argument("--router", default="jsq", help=f"replicas' router: "
                    f"{', '.join(replicas.ROUTERS)}")
    ap.add_argument("--pd", action="store_true",
                    help="two devices: the first prefills, the second decodes (PD)")
    ap.add_argument("--pp", action="store_true",
                    help="two devices: the model's layers split over them (pipeline)")
    ap.add_argument("--placed", action="store_true",
                    help="two devices: each step's kernels placed over both (FluidGPU)")
    ap.add_argument("--af", action="store_true",
                    help="two devices: attention on the first, the rest on the second (AF)")
    ap.add_argument("--depth", type=int, default=DEPTH,
                    help="--placed/--af: micro-batches in flight (default 2)")
    ap.add_argument("--selective", action="store_true",
                    help="--placed: one placement for every step, each GPU holding only the "
                         "weights and KV cache it runs (else weights replicated where they fit)")
    ap.add_argument("--whole", metavar="GPU",
                    help="--placed: this GPU of the two also holds every weight, so a step may "
                         "run on it alone; the other holds what one placement runs there")
    ap.add_argument("--store", type=Path,
                    help="--placed: keep each bucket's placement in this store (the build's: "
                         "outputs/artifacts) and reuse it")
    ap.add_argument("--routing", help="a mixture of experts' routing pattern: balanced "
                    "(default), zipf:S (skewed by a Zipf law of exponent S) or router:SEED (a "
                    "seeded router)")
    ap.add_argument("--buckets", help="--placed: token buckets, increasing, comma-separated "
                    "(default: vLLM's CUDA-graph sizes, then powers of two)")
    ap.add_argument("--link", default="rdma200",
                    help="what joins two devices (PD's KV caches, the hidden states of "
                         "PP, --placed and --af): a pimbuild/conf/link/*.yaml name")
    ap.add_argument("--offline", action="store_true",
                    help="every request arrives at once (the most the GPUs sustain)")
    ap.add_argument("--config-dir", type=Path)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--max-num-batched-tokens", type=int, default=2048)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    ap.add_argument("--kv-blocks", type=int, help="vLLM's num_gpu_blocks (one device only)")
    ap.add_argument("--measured", type=Path)
    ap.add_argument("--json", type=Path)
    return ap


@dataclass
class Served:
    """An engine and what the report says of it."""
    engine: scheduler.Engine
    gpus: str  # the GPU names it runs on
    clocks: list[clock.Clock]
    modelled: int  # the KV blocks the memory model gives
    note: str = ""
    placed: placed.Placed | None = None  # --placed / --af: the step times, with their plans

    @property
    def how(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for k in self.clocks:
            for key, n in k.how.items():
                out[key] = out.get(key, 0) + n
        return out


def engines(args: argparse.Namespace, m: shape.LlmShape) -> list[Served]:
    """An engine per ``--device`` (replicas, or PD's two), or one over both (``--pp``)."""
    names = [n.strip() for n in args.device.split(",")]
    if any(not n for n in names) or len(set(names)) != len(names):
        raise ConfigError(f"--device {args.device!r}: name each GPU once, comma-separated")
    if args.kv_blocks is not None and len(names) > 1:
        raise ConfigError("--kv-blocks is one device's count: give one --device with it")
    chosen = [k for k in TWO if getattr(args, k)]
    unused(args)
    if len(chosen) > 1:
        raise ConfigError(f"--{' and --'.join(chosen)} are different systems: give one")
    if chosen and len(names) != 2:
        raise ConfigError(f"--{chosen[0]} takes two devices: --device A,B")
    found = [clock.clock(name, args.config_dir) for name in names]
    if args.pp:
        return [pipelined(args, m, names, found)]
    if args.placed or args.af:
        return [kernel_level(args, m, names, found)]
    out = []
    system = "PD" if args.pd else "request distribution" if len(names) > 1 \
        else f"serving on {names[0]}"
    for i, (name, (kernels, spec)) in enumerate(zip(names, found, strict=True)):
        try:
            lim, modelled = limits(args, m, spec, name)
        except ConfigError as e:  # a GPU that cannot hold the model: the system cannot run
            raise ConfigError(f"{system} is infeasible: on {name}, {e}") from None
        role = ("prefill", "decode")[i] if args.pd else "both"
        out.append(Served(scheduler.Engine(Steps(m, kernels.seconds, routing=routed(args, m),
                                                 prefetch=kernels.prefetch),
                                           lim, name, role),
                          kernels.gpu.name, [kernels], modelled))
    return out


def pipelined(args: argparse.Namespace, m: shape.LlmShape, names: list[str],
              found: list[tuple[clock.Clock, dict[str, Any]]]) -> Served:
    check(args)
    memories = [memory(spec, name, args.gpu_memory_utilization)
                for name, (_, spec) in zip(names, found, strict=True)]
    first, pipe, blocks = pipeline.split(
        m, [k.seconds for k, _ in found], memories, link(args.link), args.block_size,
        args.max_num_batched_tokens, args.max_num_seqs, routed(args, m))
    lim = scheduler.Limits(args.max_num_seqs, args.max_num_batched_tokens, args.block_size,
                           blocks)
    return Served(scheduler.Engine(pipe, lim, "+".join(names)),
                  " + ".join(k.gpu.name for k, _ in found), [k for k, _ in found], blocks,
                  f"; layers {first} + {m.layers - first}")


def unused(args: argparse.Namespace) -> None:
    """An option the chosen system would not read is an error, not ignored."""
    given = {"--selective": args.selective, "--whole": args.whole is not None,
             "--store": args.store is not None,
             "--buckets": args.buckets is not None, "--depth": args.depth != DEPTH}
    for option, on in given.items():
        if on and not (args.placed or (option == "--depth" and args.af)):
            what = "--placed or --af" if option == "--depth" else "--placed"
            raise ConfigError(f"{option} applies to {what} only")
    if args.selective and args.whole is not None:
        raise ConfigError("--selective and --whole are two memory layouts: give one")


def kernel_level(args: argparse.Namespace, m: shape.LlmShape, names: list[str],
                 found: list[tuple[clock.Clock, dict[str, Any]]]) -> Served:
    """One engine over both GPUs, its kernels placed per bucket (``--placed``) or split
    attention / the rest (``--af``)."""
    check(args)
    if args.depth < 1:
        raise ConfigError("--depth must be >= 1")
    memories = [memory(spec, name, args.gpu_memory_utilization)
                for name, (_, spec) in zip(names, found, strict=True)]
    if args.whole is not None and args.whole not in names:
        raise ConfigError(f"--whole {args.whole!r} is not one of --device {','.join(names)}")
    whole = () if args.whole is None else (names.index(args.whole),)
    setting = placed.Setting(link(args.link), args.block_size, args.max_num_batched_tokens,
                             args.max_num_seqs, args.depth, buckets=buckets(args.buckets),
                             selective=args.selective, whole=whole,
                             routing=routed(args, m).pattern if m.moe else "balanced")
    system = "AF" if args.af else "kernel-level placement"
    try:
        steps = placed.Placed(m, [k.seconds for k, _ in found], memories, setting,
                              af=0 if args.af else None,
                              store=Store(args.store) if args.store else None,
                              prefetch=[k.prefetch for k, _ in found])
        blocks = steps.kv_blocks()
    except ConfigError as e:
        raise ConfigError(f"{system} is infeasible: {e}") from None
    lim = scheduler.Limits(args.max_num_seqs, args.max_num_batched_tokens, args.block_size,
                           blocks)
    how = "attention on the first" if args.af else (
        f"weights replicated, {len(steps.plans)} bucket placements" if steps.replicated
        else f"one placement, {args.whole} holding every weight" if args.whole
        else "one placement, weights where it runs them")
    if args.store:
        how += f"; {steps.reused} placement(s) reused from {args.store}"
    return Served(scheduler.Engine(steps, lim, "+".join(names)),
                  " + ".join(k.gpu.name for k, _ in found), [k for k, _ in found], blocks,
                  f"; {how}", steps)


def plans_line(p: placed.Placed, names: list[str]) -> str:
    """The buckets' placements in runs: "1-128 on a100 alone; 192-2048 over both (attention
    31-50% on l40s)"."""
    runs: list[list[dict]] = []
    for row in p.placements():
        if runs and runs[-1][0]["alone_on"] == row["alone_on"]:
            runs[-1].append(row)
        else:
            runs.append([row])
    parts = []
    for run in runs:
        span = f"{run[0]['tokens']}" + (f"-{run[-1]['tokens']}" if len(run) > 1 else "")
        if run[0]["alone_on"] is not None:
            parts.append(f"{span} on {names[run[0]['alone_on']]} alone")
            continue
        shares = [r["attention_on_second"] for r in run]
        lo, hi = f"{min(shares):.0%}", f"{max(shares):.0%}"
        parts.append(f"{span} over both (attention {lo if lo == hi else lo + '-' + hi} on "
                     f"{names[1]})")
    return "; ".join(parts)


def routed(args: argparse.Namespace, m: shape.LlmShape) -> Routing | None:
    """A mixture of experts' routing (``--routing``, balanced unless given); an error for a
    dense model given one."""
    if not m.moe:
        if args.routing is not None:
            raise ConfigError(f"--routing: {m.name} is not a mixture of experts")
        return None
    return Routing(args.routing or "balanced", m.experts, m.top_k)


def buckets(text: str | None) -> tuple[int, ...]:
    if text is None:
        return placed.BUCKETS
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise ConfigError(f"--buckets {text!r}: give whole numbers, comma-separated") from None
    return placed.check_buckets(values)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        requests = trace(args)
        if args.offline:
            requests = [replace(r, arrival_s=0.0) for r in requests]
        m = shape.load(args.model_config)
        served = engines(args, m)
        engs = [x.engine for x in served]
        ref = summary(measured(args.measured)) if args.measured else None
        began = time.perf_counter()
        seqs = serve(args, m, engs, requests)
        wall = time.perf_counter() - began
        if args.pd:
            how = f" (PD: {engs[0].name} prefills, {engs[1].name} decodes over {args.link})"
        elif args.pp or args.placed or args.af:
            what = "layers split" if args.pp else "AF" if args.af else "kernels placed"
            how = f" ({what} over {engs[0].name}, joined by {args.link})"
        else:
            how = f" ({args.router} router)" if len(engs) > 1 else ""
        sim = summary(simulated(seqs))
        rate = replicas.served(seqs)
        print(table(sim, ref))
        print(f"\n{len(requests)} requests, {rate:,.0f} output tokens/s{how}; "
              f"simulated in {wall:.2f} s")
        for x in served:
            e, r = x.engine, x.engine.run
            print(f"  {e.name} ({x.gpus}{x.note}): {len(r.seqs)} requests, {r.steps} steps, "
                  f"mean batch {sum(r.batch) / max(r.steps, 1):.1f}, {r.preemptions} "
                  f"preemptions; KV blocks {e.limits.kv_blocks} (the memory model gives "
                  f"{x.modelled}), peak {r.peak_blocks} in use; kernel times "
                  f"{_shares(x.how)}")
            if x.placed is not None:
                print(f"  bucket placements (tokens a step): "
                      f"{plans_line(x.placed, e.name.split('+'))}")
        if args.json:
            _write(args.json, {"simulated": sim, "measured": ref,
                               "throughput_tokens_per_s": rate,
                               "system": next((k for k in TWO if getattr(args, k)),
                                              "replicas"),
                               "router": args.router, "devices": {
                                   x.engine.name: {
                                       "requests": len(x.engine.run.seqs),
                                       "steps": x.engine.run.steps,
                                       "preemptions": x.engine.run.preemptions,
                                       "kv_blocks": x.engine.limits.kv_blocks,
                                       "kv_blocks_modelled": x.modelled,
                                       "buckets": x.placed.placements() if x.placed else None,
                                       "kernel_times": x.how} for x in served}})
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def serve(args: argparse.Namespace, m: shape.LlmShape, engs: list[scheduler.Engine],
          requests: list[arrivals.Request]) -> list[scheduler.Seq]:
    """``requests`` served by the system ``args`` chose, on its engines (``engines``)."""
    if args.pd:
        return disagg.serve(requests, *engs, link(args.link), m.kv_bytes_per_token)
    if args.pp or args.placed or args.af:
        return scheduler.serve(requests, engs[0]).seqs
    return [s for r in replicas.distribute(requests, engs, args.router) for s in r.seqs]


def trace(args: argparse.Namespace) -> list[arrivals.Request]:
    """The requests of ``--trace`` or ``--synthetic`` (one of them)."""
    if bool(args.trace) == bool(args.synthetic):
        raise ConfigError("give the requests as --trace FILE or --synthetic N,RATE,PROMPT,OUTPUT")
    if args.trace:
        return arrivals.trace(args.trace)
    parts = args.synthetic.split(",")
    try:
        n, rate, prompt, output = int(parts[0]), *(float(x) for x in parts[1:4])
        sigma = float(parts[4]) if len(parts) == 5 else 0.8
    except (ValueError, IndexError, TypeError):
        raise ConfigError(f"--synthetic {args.synthetic!r}: give N,RATE,PROMPT,OUTPUT[,SIGMA] "
                          f"(e.g. 1000,5,1024,256)") from None
    if len(parts) > 5:
        raise ConfigError(f"--synthetic {args.synthetic!r}: at most five numbers")
    return arrivals.lognormal(rate, n, prompt, output, sigma, args.seed)


def link(name: str) -> Link:
    """A link of the catalogue (``pimbuild/conf/link/<name>.yaml``)."""
    from omegaconf import OmegaConf

    folder = Path(str(importlib.resources.files("pimbuild.conf").joinpath("link")))
    path = folder / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown link '{name}' (choices: "
                          f"{', '.join(sorted(p.stem for p in folder.glob('*.yaml')))})")
    spec = OmegaConf.load(path)
    return Link(float(spec.gbps), float(spec.latency_us))


def _shares(how: dict[str, int]) -> str:
    total = sum(how.values()) or 1
    return ", ".join(f"{n / total:.0%} {k}" for k, n in sorted(how.items()))


def _write(path: Path, data: dict) -> None:
    if not path.parent.is_dir():
        raise ConfigError(f"cannot write {path}: {path.parent} does not exist")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


if __name__ == "__main__":
    raise SystemExit(main())
