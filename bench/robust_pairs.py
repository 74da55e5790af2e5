"""Which planned speedups survive the kernel-time model's own error (not a test): for
``bench/gpus.py``'s three pairs and its models, the throughput planner's placement on fitted
times, its speedup over each baseline, and the share of draws of the fit's held-out error
(``pimbuild.targets.gpus.costmodel.robust``) in which the placement still beats that baseline.

    .venv/bin/python bench/robust_pairs.py [--samples 32] [--out outputs/bench]

Writes ``robust_pairs.{md,json}``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import write_json  # noqa: E402
from gpus import MODELS, PAIRS, loaded, period_evaluate, unit_of  # noqa: E402

from pimbuild.build.config import register_configs  # noqa: E402
from pimbuild.targets.gpus.costmodel import robust  # noqa: E402
from pimbuild.targets.gpus.kerneltime import model as kernelmodel  # noqa: E402
from pimbuild.targets.gpus.systems import baselines

BASELINES = ("request distribution", "AF disaggregation", "layer pipeline")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--store", type=Path, default=Path("outputs/artifacts"))
    ap.add_argument("--out", type=Path, default=Path("outputs/bench"))
    args = ap.parse_args()
    register_configs()
    band = kernelmodel.load().provenance["held_out_error"]
    rows = []
    lines = [f"Planned (throughput, fitted times) over each baseline, and in how many of "
             f"{args.samples} draws of the fit's held-out error it still beats it.", "",
             "| pair | model | " + " | ".join(f"x {b} (holds)" for b in BASELINES) + " |",
             "|---|---|" + "---|" * len(BASELINES)]
    with tempfile.TemporaryDirectory() as tmp:
        for pair in PAIRS:
            for model in MODELS:
                target, data, ctx, placement, _ = loaded(
                    model, pair, args.store, Path(tmp) / model, "decide",
                    extra=("gpus.backend=fitted",))
                devices = list(target.devices)
                unit = unit_of(data)
                price = sum(d.price_per_hour for d in devices)
                planned = period_evaluate(ctx, placement, unit, price)
                base = baselines.baselines(ctx, devices, unit)
                over = {k: planned["throughput"] / v["throughput"] for k, v in base.items()}
                holds = robust.survival(ctx, ctx, placement["place"], devices,
                                        replace(unit, period=1), band, args.samples,
                                        baselines.evaluate, baselines.baselines)
                rows.append({"pair": "+".join(pair), "model": model, "speedup_over": over,
                             "holds": holds})
                cells = [f"{over[b]:.2f}x ({holds[b]:.0%})" if b in over else "n/a"
                         for b in BASELINES]
                lines.append(f"| {'+'.join(pair)} | {model} | " + " | ".join(cells) + " |")
                print(lines[-1], flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "robust_pairs.md").write_text("\n".join(lines) + "\n")
    write_json(args.out / "robust_pairs.json", rows)


if __name__ == "__main__":
    main()
