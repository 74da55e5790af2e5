"""Planners of the heterogeneous-GPU target (``gpus.planner`` with ``system=gpus``).

A planner is a module ``pimbuild/targets/gpus/planners/<name>.py`` (or ``package.module:place``)
with ``place(ctx: PlanContext) -> Plan``. ``throughput`` and ``latency`` are FluidGPU's two
policies, solved exactly as MILPs with HiGHS; ``single`` and ``af`` are baselines in the same
cost model (``pimbuild.targets.gpus.cost``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pimbuild.milp import US
from pimbuild.registry import Registry
from pimbuild.targets.gpus import ddg
from pimbuild.targets.gpus.cost import Link
from pimbuild.targets.gpus.ddg import Graph

PLANNERS = Registry("planner", "gpus.planner", package="pimbuild.targets.gpus.planners",
                    attribute="place")


@dataclass(frozen=True)
class PlanContext:
    graph: Graph
    times: list[list[float]]  # seconds of kernel k on device d
    link: Link
    n_dev: int
    comm_on_device: float  # the share of a device's transfers that occupies it
    time_limit_s: float = 60.0
    mip_gap: float = 0.0  # 0: proven optimal; else within this relative gap of the bound
    # At the time limit: the best placement found with its proven gap (True), or an error.
    incumbent: bool = False
    # A placement to start from (a MIP start, e.g. one layer's optimum repeated over a
    # period): the planner's placement is never worse than it in the planner's objective.
    start: tuple[int, ...] | None = None
    # ``graph`` is ``ddg.unroll(layer, period)``: ``period`` copies of one layer's graph
    # (``unrolled``), which the throughput planner aggregates on two devices.
    layer: Graph | None = None
    period: int = 1


@dataclass
class Plan:
    place: list[int]  # device of every kernel
    objective: float  # what the planner minimised, in seconds
    solve_s: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)


def solved(place: list[int], achieved_s: float, model: Any, seconds: float,
           status: dict[str, Any]) -> Plan:
    """The Plan of a MILP's placement. ``achieved_s`` is the cost model's value of the
    placement: equal to the MILP's objective at the optimum, and at most it for a placement
    HiGHS stopped at (its transfer variables may sit above their smallest values)."""
    bound = max(status["bound"], 0.0) / US  # times: -inf (no bound yet) says nothing more
    return Plan(place, achieved_s, seconds,
                {"variables": len(model.cost), "constraints": len(model.rows),
                 "solver_status": status["status"], "bound_s": bound,
                 "gap": max(0.0, achieved_s - bound) / achieved_s if achieved_s else 0.0})


def start_values(x: list[list[int]], start: tuple[int, ...] | None) -> dict[int, float] | None:
    """The assignment columns ``x[k][d]`` of a start placement, for ``Model.solve``."""
    if start is None:
        return None
    return {col: float(d == start[k]) for k, row in enumerate(x) for d, col in enumerate(row)}


def unrolled(one: PlanContext, period: int) -> PlanContext:
    """One layer's planner context over ``period`` layers (``ddg.unroll``; itself for 1)."""
    from dataclasses import replace

    if period == 1:
        return one
    return replace(one, graph=ddg.unroll(one.graph, period), times=one.times * period,
                   layer=one.graph, period=period)


def one_layer(ctx: PlanContext) -> PlanContext:
    """The context of one layer of a period (``unrolled``'s inverse; itself for one layer)."""
    from dataclasses import replace

    if ctx.layer is None:
        return ctx
    return replace(ctx, graph=ctx.layer, times=ctx.times[:len(ctx.layer.kernels)], layer=None,
                   period=1, start=None)


def place(name: str, ctx: PlanContext) -> Plan:
    return PLANNERS.get(name)(ctx)
