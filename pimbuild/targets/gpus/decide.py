"""Stage ``decide`` of the GPU target: the placement of every kernel by a planner
(``gpus.planner``: ``throughput`` or ``latency``, ``pimbuild.targets.gpus.planners``) over the data
dependency graph of ``gpus.period`` of the model's identical layers (one layer by default,
``ddg.unroll``'s copies otherwise); the model's layers repeat it. Writes ``placement.json``:
the device of every kernel with its times on each device, the objective and the solver's
time.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pimbuild.core.errors import ConfigError, StageError
from pimbuild.core.stage import Inputs, plain
from pimbuild.targets.gpus import planners, profile
from pimbuild.targets.gpus.planners import PLANNERS, PlanContext
from pimbuild.targets.gpus.systems import pipeline

NAME = "decide"
READS = ("extract", "profile")
WRITES = ("placement.json",)
ON_TIME_LIMIT = ("error", "best")


@dataclass(frozen=True)
class Params:
    planner: str
    planner_options: Any  # the planner's Options (None: it declares none)
    time_limit_s: float
    mip_gap: float
    on_time_limit: str  # error | best
    period: int  # layers planned as one graph; the placement repeats every period layers
    profile: profile.Params  # how the stored times were taken (and the target)


def params(cfg: DictConfig) -> Params:
    PLANNERS.check(cfg.gpus.planner)
    if cfg.gpus.on_time_limit not in ON_TIME_LIMIT:
        raise ConfigError(f"gpus.on_time_limit={cfg.gpus.on_time_limit}: choose one of "
                          f"{', '.join(ON_TIME_LIMIT)}")
    options = PLANNERS.options(cfg.gpus.planner, plain(cfg.gpus.planner_options))
    return Params(planner=cfg.gpus.planner, planner_options=options,
                  time_limit_s=cfg.gpus.time_limit_s,
                  mip_gap=cfg.gpus.mip_gap, on_time_limit=cfg.gpus.on_time_limit,
                  period=cfg.gpus.period, profile=profile.params(cfg))


def layers(inputs: Inputs) -> int:
    """The model's identical layers (the recipe's ``layers``)."""
    return json.loads((inputs["extract"] / "kernels.json").read_text()).get("layers", 1)


def layer_context(inputs: Inputs, p: Params) -> Any:
    """The planner context of one layer (what the baselines place)."""
    graph, t = profile.times(inputs, p.profile)
    target = p.profile.target
    return PlanContext(graph, t, target.link, len(target.devices), target.comm_on_device,
                       p.time_limit_s, p.mip_gap, p.on_time_limit == "best",
                       options=p.planner_options)


def context(inputs: Inputs, p: Params, one: Any = None) -> Any:
    """The planner context of ``p.period`` layers: one layer's (``one``, else read from the
    stage inputs) unrolled that many times. A period that does not divide the model's layers
    is refused."""
    one = layer_context(inputs, p) if one is None else one
    n = layers(inputs) if p.period > 1 else 1
    if n % p.period:
        raise StageError(NAME, f"gpus.period={p.period} does not divide the model's {n} "
                               f"layer(s): choose one of "
                               f"{', '.join(str(d) for d in range(1, n + 1) if n % d == 0)}")

    return planners.unrolled(one, p.period)


def objective(planner: str, ctx: Any):
    """What ``planner`` minimises, as a function of a placement of ``ctx``'s graph: its
    module's ``objective(ctx)``, found the way its ``place`` is (a built-in's, a module of the
    package's, or ``package.module:place``'s module); None where the module has none."""
    place = PLANNERS.get(planner)
    make = getattr(sys.modules.get(getattr(place, "__module__", ""), None), "objective", None)
    return make(ctx) if make is not None else None


def period_start(p: Params, one: Any, ctx: Any) -> tuple[tuple[int, ...], dict[str, Any]]:
    """The placement a period's MILP starts from: the best, in the planner's objective, of
    one layer's planned placement repeated, each device alone, every split of the period's
    whole layers between two devices (the first ``m`` on one, the rest on the other) and the
    split with the least cycle time over any of them (``pipeline.best``); with what it is."""
    reused = tuple(solve(p, one).place * p.period)
    n, score = len(one.graph.kernels), objective(p.planner, ctx)
    if score is None:
        return reused, {"kind": "one layer's placement reused"}
    keys = [d.key for d in p.profile.target.devices]

    def kind(split: pipeline.Split) -> str:
        return ", ".join(f"{m} layer(s) on {keys[d]}" for d, m in zip(split.order,
                                                                     split.counts,
                                                                     strict=True))

    ways = {reused: "one layer's placement reused"}
    for a in range(ctx.n_dev):
        ways.setdefault((a,) * (p.period * n), f"{keys[a]} alone")
    for order, counts in pipeline.splits(ctx.n_dev, p.period):
        if len(order) == 2:
            split = pipeline.Split(order, counts, 0.0)
            ways.setdefault(tuple(split.place(n)), kind(split))
    least = pipeline.best(one, p.period)
    if least is not None:
        ways.setdefault(tuple(least.place(n)), kind(least))
    best = min(ways, key=score)
    return best, {"kind": ways[best], "objective_s": score(best),
                  "reused_objective_s": score(reused)}


def solve(p: Params, ctx: Any) -> Any:
    try:
        return planners.place(p.planner, ctx)
    except RuntimeError as e:  # HiGHS stopped without a placement it can stand behind
        raise StageError(NAME, f"planner {p.planner} on {len(ctx.graph.kernels)} kernels: {e} "
                               f"(gpus.time_limit_s={p.time_limit_s}, gpus.mip_gap="
                               f"{p.mip_gap}; raise the limit, accept a gap, or keep the best "
                               f"placement found: gpus.on_time_limit=best)") from None


def run(inputs: Inputs, p: Params, out: Path) -> None:
    from dataclasses import replace

    one = layer_context(inputs, p)
    ctx, start = context(inputs, p, one), {}
    if p.period > 1:
        first, start = period_start(p, one, ctx)
        ctx = replace(ctx, start=first)
    plan = solve(p, ctx)
    keys = [d.key for d in p.profile.target.devices]
    per_layer = len(ctx.graph.kernels) // p.period
    (out / "placement.json").write_text(json.dumps({
        "planner": p.planner, "devices": keys, "objective_s": plan.objective,
        "solve_s": plan.solve_s, **plan.info, "period": p.period,
        **({"start": start} if start else {}),
        "place": plan.place,
        "kernels": [{"id": k.id, "layer": k.id // per_layer, "name": k.name, "kind": k.kind,
                     "device": keys[d],
                     **{f"t_{key}_s": t for key, t in zip(keys, ctx.times[k.id], strict=True)}}
                    for k, d in zip(ctx.graph.kernels, plan.place, strict=True)],
    }, indent=2) + "\n")
