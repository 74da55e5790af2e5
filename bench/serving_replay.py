"""LLMServingSim's measured vLLM runs replayed with ``pimbuild-serve``'s engine simulation (not
a test): for each example of an LLMServingSim checkout or bare clone (github
``casys-kaist/LLMServingSim``, MIT; ``bench/examples/<gpu>/<model>/vllm/``), the workload it
served, the model's config, vLLM's settings, and its per-request records; the simulated TTFT,
TPOT and latency beside the measured ones. Then the simulation's speed on a long Poisson
trace (requests per minute of wall time).

    .venv/bin/python bench/serving_replay.py LLMSERVINGSIM [--only RTX4090] [--out outputs/bench]

The RTX 4090 example is the one pimbuild was developed against; the others are a held-out
check, run once and reported, never tuned to. vLLM's ``num_gpu_blocks`` is used where its
record has it (else the memory model's count, which is printed beside it). Writes
``serving_replay.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import write_json  # noqa: E402

from pimbuild.core.errors import ConfigError  # noqa: E402
from pimbuild.targets.gpus.enginesim import cli, scheduler, shape  # noqa: E402
from pimbuild.targets.gpus.enginesim.steps import Steps  # noqa: E402
from pimbuild.targets.gpus.kerneltime import clock  # noqa: E402
from pimbuild.targets.gpus.kerneltime.sources import Repo  # noqa: E402
from pimbuild.targets.gpus.systems import arrivals  # noqa: E402

DEVICES = {"RTX4090": "rtx4090", "RTXPRO6000": "rtxpro6000"}
EXAMPLES = "bench/examples"


def replay(repo: Repo, folder: str, tmp: Path, kv_blocks: bool = True) -> dict:
    meta = json.loads(repo.read(f"{folder}/vllm/meta.json") or "{}")
    gpu = folder.split("/")[2]
    kw = meta.get("engine_kwargs", {})
    files = {}
    for name, path in (("trace.jsonl", meta.get("dataset_path", "")),
                       ("config.json", f"configs/model/{meta.get('model')}.json"),
                       ("measured.jsonl", f"{folder}/vllm/requests.jsonl")):
        text = repo.read(path)
        if text is None:
            return {"example": folder, "error": f"{path} is not in the checkout"}
        (tmp / name).write_text(text)
        files[name] = tmp / name
    try:
        m = shape.load(files["config.json"])
        kernels, spec = clock.clock(DEVICES[gpu])
        util = meta.get("kv_cache", {}).get("gpu_memory_utilization", 0.9)
        modelled = cli.memory(spec, DEVICES[gpu], util).kv_blocks(
            m, 16, kw.get("max_num_batched_tokens", 2048), kw.get("max_num_seqs", 256))
    except ConfigError as e:
        return {"example": folder, "error": str(e)}
    reported = meta.get("kv_cache", {}).get("num_gpu_blocks")
    blocks = reported if kv_blocks and reported else modelled
    lim = scheduler.Limits(kw.get("max_num_seqs", 256), kw.get("max_num_batched_tokens", 2048),
                           16, blocks)
    run = scheduler.simulate(arrivals.trace(files["trace.jsonl"]), Steps(m, kernels.seconds),
                             lim)
    return {"example": folder, "kv_blocks": blocks, "kv_blocks_vllm": reported,
            "kv_blocks_modelled": modelled, "preemptions": run.preemptions,
            "kernel_times": kernels.how, "simulated": cli.summary(cli.simulated(run.seqs)),
            "measured": cli.summary(cli.measured(files["measured.jsonl"]))}


def speed(n: int = 20_000) -> dict:
    """The simulation's wall time on ``n`` Poisson requests on the RTX 4090."""
    rng = random.Random(0)
    t, reqs = 0.0, []
    for _ in range(n):
        t += rng.expovariate(8.0)
        reqs.append(arrivals.Request(t, rng.randint(16, 2048), rng.randint(8, 512)))
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "c.json"
        p.write_text(json.dumps({"hidden_size": 4096, "num_attention_heads": 32,
                                 "num_key_value_heads": 8, "num_hidden_layers": 32,
                                 "intermediate_size": 14336, "vocab_size": 128256}))
        m = shape.load(p)
    kernels, _ = clock.clock("rtx4090")
    began = time.perf_counter()
    run = scheduler.simulate(reqs, Steps(m, kernels.seconds), scheduler.Limits(kv_blocks=2588))
    wall = time.perf_counter() - began
    return {"requests": n, "steps": run.steps, "wall_s": wall,
            "requests_per_minute": n / wall * 60}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("llmservingsim", type=Path)
    ap.add_argument("--only", default="", help="examples whose folder contains this")
    ap.add_argument("--out", type=Path, default=Path("outputs/bench"))
    args = ap.parse_args()
    repo = Repo(args.llmservingsim)
    folders = sorted({p.rsplit("/vllm/", 1)[0] for p in repo.list(EXAMPLES)
                      if p.endswith("/vllm/meta.json") and args.only in p})
    results = []
    with tempfile.TemporaryDirectory() as d:
        for folder in folders:
            for kv in (True, False):
                r = replay(repo, folder, Path(d), kv)
                r["blocks_from"] = "vllm" if kv and r.get("kv_blocks_vllm") else "memory model"
                results.append(r)
                print(json.dumps({k: r.get(k) for k in ("example", "blocks_from", "kv_blocks",
                                                         "error")}))
                if "error" in r or not r.get("kv_blocks_vllm"):
                    break  # no vLLM block count: the memory model's run is the only one
                for k in cli.METRICS:
                    s, m = r["simulated"][k], r["measured"][k]
                    print("  " + k, "  ".join(f"{q} {s[q]:.1f}/{m[q]:.1f} "
                                              f"({s[q] / m[q] - 1:+.1%})" for q in cli.STATS))
    fast = speed()
    print(json.dumps(fast))
    write_json(args.out / "serving_replay.json", {"examples": results, "speed": fast})


if __name__ == "__main__":
    main()
