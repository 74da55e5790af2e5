"""Stage ``decide`` of the GPU target: the placement of every kernel by a planner
(``policy.name``: ``throughput`` or ``latency``, ``pimbuild.gpus.planners``) over one layer's
data dependency graph; identical layers reuse it. Writes ``placement.json``: the device of every
kernel with its times on each device, the objective and the solver's time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pimbuild.errors import ConfigError, StageError
from pimbuild.gpus import profile
from pimbuild.stage import Inputs

NAME = "decide"
READS = ("extract", "profile")
WRITES = ("placement.json",)
ON_TIME_LIMIT = ("error", "best")


@dataclass(frozen=True)
class Params:
    policy: str
    time_limit_s: float
    mip_gap: float
    on_time_limit: str  # error | best
    profile: profile.Params  # how the stored times were taken (and the target)


def params(cfg: DictConfig) -> Params:
    from pimbuild.gpus.planners import PLANNERS

    PLANNERS.check(cfg.policy.name)
    if cfg.gpus.on_time_limit not in ON_TIME_LIMIT:
        raise ConfigError(f"gpus.on_time_limit={cfg.gpus.on_time_limit}: choose one of "
                          f"{', '.join(ON_TIME_LIMIT)}")
    return Params(policy=cfg.policy.name, time_limit_s=cfg.gpus.time_limit_s,
                  mip_gap=cfg.gpus.mip_gap, on_time_limit=cfg.gpus.on_time_limit,
                  profile=profile.params(cfg))


def context(inputs: Inputs, p: Params) -> Any:
    from pimbuild.gpus.planners import PlanContext

    graph, t = profile.times(inputs, p.profile)
    target = p.profile.target
    return PlanContext(graph, t, target.link, len(target.devices), target.comm_on_device,
                       p.time_limit_s, p.mip_gap, p.on_time_limit == "best")


def run(inputs: Inputs, p: Params, out: Path) -> None:
    from pimbuild.gpus import planners

    ctx = context(inputs, p)
    try:
        plan = planners.place(p.policy, ctx)
    except RuntimeError as e:  # HiGHS stopped without a placement it can stand behind
        raise StageError(NAME, f"planner {p.policy} on {len(ctx.graph.kernels)} kernels: {e} "
                               f"(gpus.time_limit_s={p.time_limit_s}, gpus.mip_gap="
                               f"{p.mip_gap}; raise the limit, accept a gap, or keep the best "
                               f"placement found: gpus.on_time_limit=best)") from None
    keys = [d.key for d in p.profile.target.devices]
    (out / "placement.json").write_text(json.dumps({
        "policy": p.policy, "devices": keys, "objective_s": plan.objective,
        "solve_s": plan.solve_s, **plan.info,
        "place": plan.place,
        "kernels": [{"id": k.id, "name": k.name, "kind": k.kind, "device": keys[d],
                     **{f"t_{key}_s": t for key, t in zip(keys, ctx.times[k.id], strict=True)}}
                    for k, d in zip(ctx.graph.kernels, plan.place, strict=True)],
    }, indent=2) + "\n")
