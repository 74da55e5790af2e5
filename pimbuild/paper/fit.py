"""The PIM model's fit to the paper's published numbers (issue 13 item 1; ``bench/fit_pim.py``
runs it and writes ``pimbuild/conf/pim/fitted_paper.yaml``).

The free parameters are the ones no spec sheet gives (``pimbuild/targets/pim/target.py``): lines in
flight per core (``mlp``), the stack's aggregate bandwidth (``stack_bw_gbps``), the share of
compute/memory overlap (``overlap``), elements per instruction (``lanes``) and the per-core
synchronization cost (``sync_ns_per_core``). The targets are ``pimbuild.paper.PIM_SIDE``: what
Fig. 3 and §5.2 say about the PIM side alone, as ratios with no host time in them, each taken
over the nests the rule offloads at 128 cores. The fit minimizes the mean squared log error over
one half of the models (scipy's differential evolution, fixed seed); the other half is held out.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from pimbuild import paper
from pimbuild.targets.offload import simulate
from pimbuild.targets.offload.copymodels import UPPER_BOUND, CopyModel
from pimbuild.targets.offload.hostfacts import b_cpu
from pimbuild.targets.offload.nests import Nest, load_nests, outputs
from pimbuild.targets.offload.policies import PolicyContext, PolicyParams
from pimbuild.targets.pim import PimTarget

# name -> (lower, upper, log scale?): the search box, wide around every plausible value.
FREE = {"mlp": (1.0, 16.0, True),  # 1: in-order, blocking; 16: an aggressive MSHR file
        "stack_bw_gbps": (32.0, 4096.0, True),  # one DDR channel .. UPMEM-scale TB/s
        "overlap": (0.0, 1.0, False),
        "lanes": (1.0, 16.0, True),  # scalar .. AVX-512 floats
        "sync_ns_per_core": (0.0, 200.0, False)}


@dataclasses.dataclass(frozen=True)
class Case:
    """One model's host-side data: what a fit point's prediction needs besides the target."""

    model: str
    nests: list[Nest]
    forward_s: float
    outputs: set[str]
    b_cpu_gbps: float

    def context(self, policy: PolicyParams, target: PimTarget,
                copy_model: CopyModel = UPPER_BOUND) -> PolicyContext:
        """The model's nests as the policy and the simulator see them on ``target``."""
        return PolicyContext(self.nests, self.forward_s, self.outputs, self.b_cpu_gbps, policy,
                             target, copy_model)


def case_from_stages(model: str, stages: dict[str, Path]) -> Case:
    """A model's Case from its ``extract``, ``profile`` and ``calibrate`` artifacts."""
    ex, pr = stages["extract"], stages["profile"]
    found = load_nests(ex / "candidates.json", pr / "timing.csv", pr / "counters.csv")
    info = json.loads((pr / "profile.json").read_text())
    return Case(model, found, info["forward_s"], outputs(ex / "candidates.json"),
                b_cpu(stages["calibrate"]))


def predict(case: Case, policy: PolicyParams, target: PimTarget, cores: int,
            copy_model: CopyModel = UPPER_BOUND) -> float:
    """Speedup over CPU-only of the rule's placement at ``cores`` PIM cores."""
    ctx = case.context(policy, target.with_units(cores), copy_model)
    return simulate.evaluate(ctx, simulate.placement(policy.name, ctx))["speedup"]


def points(models: tuple[str, ...]) -> list[tuple[str, str, int, float]]:
    return [pt for pt in paper.PIM_SIDE if pt[0] in models]


def quantity(case: Case, policy: PolicyParams, target: PimTarget, name: str, cores: int,
             copy_model: CopyModel = UPPER_BOUND) -> float:
    """A ``paper.PIM_SIDE`` quantity for the set the paper's rule offloads at 128 cores (NaN
    when it offloads nothing there). The points describe the sets the paper's own rule chose,
    so the set is taken with the paper's C4 (``policy.c4=paper``) whatever the configured C4:
    ``read_later`` keeps zeroing's output-only nest on the host, the paper offloads it."""
    policy = dataclasses.replace(policy, c4="paper")

    def context(units: int) -> PolicyContext:
        return case.context(policy, target.with_units(units), copy_model)

    chosen = simulate.placement(policy.name, context(128))
    if not chosen:
        return math.nan
    here = simulate.evaluate(context(cores), chosen)
    base = simulate.evaluate(context(128), chosen)
    if name == "pim_over_copy":
        return here["t_pim_s"] / here["t_copy_s"]
    if name == "pim_ratio":
        return here["t_pim_s"] / base["t_pim_s"]
    if name == "x_ratio":  # x = T_pim + T_copy + N_region T_sw, the offloaded set's cost
        def x(b: dict[str, Any]) -> float:
            return b["t_pim_s"] + b["t_copy_s"] + b["t_switch_s"]
        return x(here) / x(base)
    raise ValueError(f"unknown PIM-side quantity {name}")


def with_free(target: PimTarget, x: np.ndarray, names: list[str]) -> PimTarget:
    values = {name: (math.exp(v) if FREE[name][2] else float(v))
              for name, v in zip(names, x, strict=True)}
    return dataclasses.replace(target, **values)


def log_errors(cases: dict[str, Case], policy: PolicyParams, target: PimTarget,
               pts: list[tuple[str, str, int, float]]) -> list[float]:
    """log(ours / paper) per point; a point the rule leaves nothing offloaded for counts as
    a factor-of-e miss (it cannot be matched)."""
    out = []
    for m, q, c, v in pts:
        ours = quantity(cases[m], policy, target, q, c)
        out.append(1.0 if math.isnan(ours) else math.log(ours / v))
    return out


def fit(cases: dict[str, Case], policy: PolicyParams, base: PimTarget,
        pts: list[tuple[str, str, int, float]], seed: int = 0, maxiter: int = 60,
        fixed: dict[str, float] | None = None) -> tuple[PimTarget, float]:
    """The free parameters that minimize the mean squared log error over ``pts``; ``fixed``
    pins some of them (a sensitivity check: how well does the fit do without one?)."""
    base = dataclasses.replace(base, **(fixed or {}))
    names = [n for n in FREE if n not in (fixed or {})]
    bounds = [(math.log(FREE[n][0]), math.log(FREE[n][1])) if FREE[n][2]
              else FREE[n][:2] for n in names]

    def loss(x: np.ndarray) -> float:
        target = with_free(base, x, names)
        return float(np.mean(np.square(log_errors(cases, policy, target, pts))))

    from scipy.optimize import differential_evolution

    result = differential_evolution(loss, bounds, seed=seed, maxiter=maxiter, popsize=12,
                                    tol=1e-6, polish=True)
    return with_free(base, result.x, names), float(result.fun)


def summary(errors: list[float]) -> dict[str, float]:
    """Mean absolute error as a factor (exp(mean |log ratio|) - 1) and the RMS log error."""
    a = np.abs(errors)
    return {"mean_abs_pct": float(math.expm1(a.mean()) * 100),
            "max_abs_pct": float(math.expm1(a.max()) * 100),
            "rms_log": float(math.sqrt(np.mean(np.square(errors))))}


def halves() -> tuple[tuple[str, tuple[str, ...]], ...]:
    return (("fit", paper.FIT_HALF), ("held-out", paper.HELD_OUT_HALF))


