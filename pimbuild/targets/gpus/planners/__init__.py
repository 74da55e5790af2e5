"""Planners of the heterogeneous-GPU target (``gpus.planner`` with ``system=gpus``).

A planner is a module ``pimbuild/targets/gpus/planners/<name>.py`` (or ``package.module:place``)
with ``place(ctx: PlanContext) -> Plan``, and, if it has options of its own, a dataclass
``Options`` (``ctx.options``; ``gpus.planner_options``, checked by the registry).
``throughput`` and ``latency`` are FluidGPU's two policies, solved exactly as MILPs with
HiGHS, in the cost model of ``pimbuild.targets.gpus.costmodel.cost``.

Memory (``PlanContext.resident``, ``capacity``): where given, what the kernels placed on a
device keep there (their weights, the KV cache of an attention kernel) must fit its capacity,
``sum_k r_k x[k][d] <= M_d``, a row of every planner's MILP.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pimbuild.core.milp import US
from pimbuild.core.registry import Registry
from pimbuild.targets.gpus.costmodel import ddg
from pimbuild.targets.gpus.costmodel.cost import Link
from pimbuild.targets.gpus.costmodel.ddg import Graph

PLANNERS = Registry("planner", "gpus.planner", package="pimbuild.targets.gpus.planners",
                    attribute="place", options="gpus.planner_options")


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
    # bytes each kernel keeps on the device it runs on, and each device's room for them
    resident: tuple[float, ...] | None = None
    capacity: tuple[float, ...] | None = None
    # the planner's own options (its module's ``Options``, from gpus.planner_options)
    options: Any = None

    def fits(self, place: list[int] | tuple[int, ...]) -> bool:
        """Whether a placement keeps every device within its ``capacity``."""
        if self.capacity is None:
            return True
        held = [0.0] * self.n_dev
        for k, d in enumerate(place):
            held[d] += self.resident[k]
        return all(h <= c for h, c in zip(held, self.capacity, strict=True))


@dataclass
class Plan:
    place: list[int]  # device of every kernel
    objective: float  # what the planner minimised, in seconds
    solve_s: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)


def relative_gap(achieved_s: float, bound_s: float) -> float:
    """How far a placement's cycle time ``achieved_s`` may be above the optimum, given a lower
    bound ``bound_s`` on it: ``(achieved - bound) / achieved``, 0 at or below the bound."""
    return max(0.0, achieved_s - bound_s) / achieved_s if achieved_s else 0.0


def solved(place: list[int], achieved_s: float, model: Any, seconds: float,
           status: dict[str, Any]) -> Plan:
    """The Plan of a MILP's placement. ``achieved_s`` is the cost model's value of the
    placement: equal to the MILP's objective at the optimum, and at most it for a placement
    HiGHS stopped at (its transfer variables may sit above their smallest values)."""
    bound = max(status["bound"], 0.0) / US  # times: -inf (no bound yet) says nothing more
    return Plan(place, achieved_s, seconds,
                {"variables": len(model.cost), "constraints": len(model.rows),
                 "solver_status": status["status"], "bound_s": bound,
                 "gap": relative_gap(achieved_s, bound)})


def start_values(x: list[list[int]], ctx: PlanContext) -> dict[int, float] | None:
    """The assignment columns ``x[k][d]`` of the start placement, for ``Model.solve`` (none
    where it does not fit the devices' memory)."""
    start = ctx.start
    if start is None or not ctx.fits(start):
        return None
    return {col: float(d == start[k]) for k, row in enumerate(x) for d, col in enumerate(row)}


GB = 1e-9  # memory rows in gigabytes: coefficients near the times' microseconds


def memory_rows(m: Any, x: list[list[int]], ctx: PlanContext) -> None:
    """Each device holds what its kernels keep there: ``sum_k r_k x[k][d] <= M_d``."""
    if ctx.capacity is None:
        return
    for d, room in enumerate(ctx.capacity):
        if room != float("inf"):  # a device with room for everything needs no row
            m.row({x[k][d]: GB * r for k, r in enumerate(ctx.resident) if r}, hi=GB * room)


def unrolled(one: PlanContext, period: int) -> PlanContext:
    """One layer's planner context over ``period`` layers (``ddg.unroll``; itself for 1)."""
    from dataclasses import replace

    if period == 1:
        return one
    resident = None if one.resident is None else one.resident * period
    return replace(one, graph=ddg.unroll(one.graph, period), times=one.times * period,
                   layer=one.graph, period=period, resident=resident)


def one_layer(ctx: PlanContext) -> PlanContext:
    """The context of one layer of a period (``unrolled``'s inverse; itself for one layer)."""
    from dataclasses import replace

    if ctx.layer is None:
        return ctx
    n = len(ctx.layer.kernels)
    capacity = None if ctx.capacity is None else tuple(c / ctx.period for c in ctx.capacity)
    return replace(ctx, graph=ctx.layer, times=ctx.times[:n], layer=None, period=1, start=None,
                   resident=None if ctx.resident is None else ctx.resident[:n],
                   capacity=capacity)


def place(name: str, ctx: PlanContext) -> Plan:
    return PLANNERS.get(name)(ctx)
