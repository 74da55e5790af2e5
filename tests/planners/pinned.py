"""A planner of one's own with one typed option (tests/test_plugin_options.py): every kernel on
the device ``gpus.planner_options.device`` names. This file is all it takes."""

from __future__ import annotations

from dataclasses import dataclass, field

from pimbuild.targets.gpus.costmodel.cost import cycle_time
from pimbuild.targets.gpus.planners import Plan, PlanContext


@dataclass(frozen=True)
class Options:
    device: int = field(default=0, metadata={"range": (">=", 0)})  # the index in devices=


def place(ctx: PlanContext) -> Plan:
    if ctx.options.device >= ctx.n_dev:
        raise ValueError(f"device {ctx.options.device} of {ctx.n_dev}")
    chosen = [ctx.options.device] * len(ctx.graph.kernels)
    return Plan(chosen, cycle_time(ctx.graph, chosen, ctx.times, ctx.link, ctx.n_dev,
                                   ctx.comm_on_device))
