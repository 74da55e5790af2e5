"""Placements against the kernel-time model's own error: does the planned placement still beat
each baseline when the kernel times are off by as much as the model is off on GPUs it was not
fitted to? (Beyond the paper; docs/gpus.md.)

A draw multiplies every predicted kernel time by ``exp(b + r)``: ``b`` one bias per device and
kernel family, drawn from the held-out (device, family) cells' median log errors, since a
model's error on an unseen GPU is mostly a bias shared by its kernels; ``r`` per kernel, drawn
from the held-out residuals about those medians (the fit records both: ``evaluate.pooled``).
The placement stays as planned; it and every baseline are evaluated on the drawn times. A
speedup that does not hold in most draws is inside the model's error.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace
from typing import Any

FAMILY = {"contraction": "gemm", "reduction": "reduction"}  # any other kind: elementwise
HOLDS = 0.9  # a speedup is outside the error band when it holds in this share of draws


def family(kind: str) -> str:
    return FAMILY.get(kind, "elementwise")


def factors(kinds: list[str], n_dev: int, band: dict[str, Any], rng: random.Random
            ) -> list[list[float]]:
    """One draw: a factor per kernel and device."""
    bias = {(f, d): rng.choice(band[f]["log_bias"]) for f in band for d in range(n_dev)}
    return [[math.exp(bias[(family(k), d)] + rng.choice(band[family(k)]["log_residual"]))
             for d in range(n_dev)] for k in kinds]


def survival(one: Any, ctx: Any, place: list[int], devices: list[Any], unit: Any,
             band: dict[str, Any], samples: int, evaluate, baselines, seed: int = 0
             ) -> dict[str, float]:
    """Per baseline: the share of ``samples`` draws in which ``place`` (on ``ctx``, the
    planned period of ``one``'s layer) has more throughput than the baseline."""
    kinds = [k.kind for k in one.graph.kernels]
    if not band or not all(family(k) in band for k in kinds):
        return {}
    rng = random.Random(seed)
    n = len(kinds)
    price = sum(d.price_per_hour for d in devices)
    wins: dict[str, int] = {}
    for _ in range(samples):
        f = factors(kinds, len(devices), band, rng)
        drawn_one = replace(one, times=[[t * x for t, x in zip(row, f[k], strict=True)]
                                        for k, row in enumerate(one.times)])
        drawn = replace(ctx, times=[[t * x for t, x in zip(row, f[i % n], strict=True)]
                                    for i, row in enumerate(ctx.times)])
        planned = evaluate(drawn, place, unit, price)["throughput"]
        for name, b in baselines(drawn_one, devices, unit).items():
            wins[name] = wins.get(name, 0) + (planned > b["throughput"])
    return {name: w / samples for name, w in wins.items()}


def note(speedup_over: dict[str, float], holds: dict[str, float], samples: int) -> list[str]:
    """A console line naming the speedups the model's error can undo."""
    inside = [f"{k} {v:.2f}x (holds in {holds[k]:.0%})" for k, v in speedup_over.items()
              if k in holds and v > 1 and holds[k] < HOLDS]
    lost = [f"{k} ({holds[k]:.0%})" for k, v in speedup_over.items()
            if k in holds and v <= 1 and holds[k] > 1 - HOLDS]
    lines = []
    if inside:
        lines.append(f"[yellow]inside the kernel-time model's error[/] ({samples} draws of its "
                     f"held-out error): speedup over " + ", ".join(inside))
    if lost:
        lines.append("baselines ahead only within the kernel-time model's error; the planned "
                     "placement wins in some draws: " + ", ".join(lost))
    if not inside and not lost and holds:
        lines.append(f"every comparison with a baseline comes out the same in at least "
                     f"{HOLDS:.0%} of {samples} draws of the kernel-time model's held-out error")
    return lines
