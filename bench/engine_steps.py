"""A decode step's time across vLLM's batch buckets on each GPU alone and placed kernel by
kernel over the first two (``pimbuild-serve --placed``: each bucket's placement, the share
of its layers' attention and of its compute on the second GPU), and the KV blocks each
holds for the model (not a test): ``pimbuild-serve``'s step times and memory model.

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

from pimbuild.targets.gpus.enginesim import cli, placed, shape  # noqa: E402
from pimbuild.targets.gpus.enginesim.steps import Steps  # noqa: E402
from pimbuild.targets.gpus.kerneltime import clock  # noqa: E402

BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)  # batch sizes placed


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
    out["placed"] = pair(m, args.devices.split(",")[:2], args.kv)
    write_json(args.out / "engine_steps.json", out)


def pair(m: shape.LlmShape, names: list[str], kv: int) -> dict:
    """The decode step placed over two GPUs at each bucket, and the KV blocks the placement
    leaves with the weights replicated and with one placement (``--selective``)."""
    found = [clock.clock(n) for n in names]
    mems = [cli.memory(spec, n, 0.9) for n, (_, spec) in zip(names, found, strict=True)]
    out = {"devices": names}
    for selective in (False, True):
        p = placed.Placed(m, [k.seconds for k, _ in found], mems,
                          placed.Setting(cli.link("rdma200"), selective=selective))
        rows = {b: {"step_s": p.seconds([], [kv] * b), "attention_on_second": p.attention_share(b),
                    "compute_on_second": p.compute_share(b)} for b in BUCKETS}
        key = "selective" if selective else "replicated"
        out[key] = {"kv_blocks": p.kv_blocks(), "buckets": rows}
        print(f"placed over {'+'.join(names)} ({key}): {out[key]['kv_blocks']} KV blocks")
        print("  decode step (ms; attention layers on the second, compute on the second): "
              + ", ".join(f"{b}: {r['step_s'] * 1e3:.2f} ({r['attention_on_second']:.0%}, "
                          f"{r['compute_on_second']:.0%})" for b, r in rows.items()))
    return out


if __name__ == "__main__":
    main()
