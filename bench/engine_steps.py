"""A decode step's time across vLLM's batch buckets on each GPU alone, and the KV blocks each
GPU holds for the model (not a test): ``pimbuild-serve``'s step times and memory model.

    .venv/bin/python bench/engine_steps.py CONFIG.json [--devices a100,l40s] [--kv 1024]
                                           [--out outputs/bench]

Writes ``engine_steps.json``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import write_json  # noqa: E402

from pimbuild.targets.gpus.enginesim import cli, shape  # noqa: E402
from pimbuild.targets.gpus.enginesim.steps import Steps  # noqa: E402
from pimbuild.targets.gpus.kerneltime import clock  # noqa: E402

BUCKETS = (1, 2, 4, 8, 16, 24, 32, 64, 128, 256)  # vLLM's CUDA-graph batch sizes, a subset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config", type=Path, help="the model's Hugging Face config.json")
    ap.add_argument("--devices", default="a100,l40s")
    ap.add_argument("--kv", type=int, default=1024, help="KV length of every sequence")
    ap.add_argument("--out", type=Path, default=Path("outputs/bench"))
    args = ap.parse_args()
    m = shape.load(args.config)
    out = {"model": m.name, "kv": args.kv, "devices": {}}
    for name in args.devices.split(","):
        kernels, spec = clock.clock(name)
        steps = Steps(m, kernels.seconds)
        blocks = cli.memory(spec, name, 0.9).kv_blocks(m, 16, 2048, 256)
        per = {b: steps.seconds([], [args.kv] * b) for b in BUCKETS}
        out["devices"][name] = {"kv_blocks": blocks, "kv_positions": blocks * 16,
                                "decode_step_s": per, "kernel_times": kernels.how}
        print(f"{name}: {blocks} KV blocks ({blocks * 16:,} positions: "
              f"{blocks * 16 // args.kv} sequences of {args.kv})")
        print("  decode step (ms) by batch: " + ", ".join(f"{b}: {t * 1e3:.2f}"
                                                         for b, t in per.items()))
    write_json(args.out / "engine_steps.json", out)


if __name__ == "__main__":
    main()
