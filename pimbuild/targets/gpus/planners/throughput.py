"""Planner ``throughput``: FluidGPU's MILP for pipelined requests (docs/design.md §10).

Minimise the cycle time ``C`` (``pimbuild.targets.gpus.costmodel.cost.cycle_time``) over binary
``x[k][d]`` (kernel ``k`` on device ``d``). For every buffer ``b`` a placement may move,
``r[b][d]`` is 1 when ``b`` must be received on ``d`` (a reader or, for a result, home is
there and its source is not), and ``w[b][e][d]`` when it is sent from ``e`` to ``d``:

    sum_d x[k][d] = 1
    r[b][d] >= x[v][d] - x[s][d]            for every reader v of b (s: b's source)
    w[b][e][d] <= x[s][e],  sum_e w[b][e][d] = r[b][d]   (a receive is one send, from
                                                          where b is; 3+ devices)
    C >= sum_k t[k][d] x[k][d] + kappa * sum_b c_b (r[b][d] + sum_e w[b][d][e])
    C >= sum_b c_b sum_e w[b][d][e]         (device d's link, out)
    C >= sum_b c_b r[b][d]                  (device d's link, in)

``c_b`` is the transfer time of ``b``, ``kappa`` ``gpus.comm_on_device``. For a fixed ``x`` the
smallest feasible ``r``, ``w`` are exactly the transfers ``ddg.transfers`` lists, so the optimum
equals the cost model's minimum (checked against brute force in the tests).

On two devices it is first solved without ``C`` (``balanced``): the larger busy row's
right-hand side is their mean plus ``E``, with ``E >= +-(B0 - B1) / 2``, the mean in the
objective on the placement's own columns, and the link rows left out. That optimum bounds
every placement's cycle time from below, and is the cycle time of its own placement unless a
link's load exceeds both busy times; only then is the MILP above solved, from that placement.
The relaxation is the same less the link rows; with the objective on the columns HiGHS's
reduced costs fix most of them once it has a placement, where ``C`` alone in the objective
left them free. (On three devices, the mean plus ``E >= B_d - mean``, it was slower than
the MILP above: docs/measurements/tool_speed_epyc.md.)

A period of identical layers on two devices (``PlanContext.layer``) is solved with the layers
counted instead of placed (``_layers``): the same optimum, from three small MILPs (one carried
stream), or from eight and then this MILP from their best (two).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from pimbuild.core.milp import US, Model
from pimbuild.targets.gpus.costmodel.cost import cycle_time
from pimbuild.targets.gpus.costmodel.ddg import HOME
from pimbuild.targets.gpus.planners import (
    Plan,
    PlanContext,
    _layers,
    memory_rows,
    relative_gap,
    solved,
    start_values,
)


def assignment(m: Model, n_kernels: int, n_dev: int) -> list[list[int]]:
    x = [[m.var(0, 1, binary=True) for _ in range(n_dev)] for _ in range(n_kernels)]
    for row in x:
        m.row(dict.fromkeys(row, 1.0), 1, 1)
    return x


def placement(x: list[list[int]], values, start: tuple[int, ...] | None = None) -> list[int]:
    """Each kernel's device from a MILP's values, or, where HiGHS stopped before it completed
    the MIP start (``values`` None, ``Model.solve``), the ``start`` itself."""
    if values is None:
        return list(start)
    return [max(range(len(row)), key=lambda d: values[row[d]]) for row in x]


def objective(ctx: PlanContext) -> Callable[[list[int]], float]:
    """What this planner minimises, the cycle time of a placement of ``ctx``'s graph (the
    build compares start placements with it, ``decide.objective``)."""
    return lambda place: cycle_time(ctx.graph, place, ctx.times, ctx.link, ctx.n_dev,
                                        ctx.comm_on_device)


def place(ctx: PlanContext) -> Plan:
    if _layers.applies(ctx):
        return _layers.place(ctx, per_kernel)
    return per_kernel(ctx)


@dataclass
class Loads:
    """A placement's model (``loads``): the assignment columns and, per device, what each
    column adds to the device's busy time (its kernels and ``kappa`` times its transfers) and
    to its link out and in (microseconds)."""

    x: list[list[int]]
    busy: list[dict[int, float]]
    out: list[dict[int, float]]
    into: list[dict[int, float]]


def per_kernel(ctx: PlanContext, options: dict | None = None) -> Plan:
    """The MILP above; ``options``: more HiGHS options (``Model.solve``). On two devices it
    is first solved as ``balanced``, and as above only where a link's load is the cycle time
    of the placement that finds."""
    balanced_plan, links_free = balanced(ctx, options) if ctx.n_dev == 2 else (None, False)
    if links_free:
        return balanced_plan
    if balanced_plan is not None:  # start from its placement, within the time left
        left = max(0.0, ctx.time_limit_s - balanced_plan.solve_s)
        ctx = replace(ctx, time_limit_s=left, start=tuple(balanced_plan.place))
    m = Model()
    c = m.var(cost=1.0)
    ld = loads(m, ctx)
    for d in range(ctx.n_dev):
        m.row({c: 1.0, **{col: -t for col, t in ld.busy[d].items()}}, 0)
        m.row({c: 1.0, **{col: -t for col, t in ld.out[d].items()}}, 0)
        m.row({c: 1.0, **{col: -t for col, t in ld.into[d].items()}}, 0)
    plan, _ = solve(m, ld.x, ctx, options)
    if balanced_plan is not None:  # both bound every placement
        bound = max(plan.info["bound_s"], balanced_plan.info["bound_s"])
        plan.solve_s += balanced_plan.solve_s
        plan.info.update(bound_s=bound, gap=relative_gap(plan.objective, bound))
    return plan


def balanced(ctx: PlanContext, options: dict | None = None) -> tuple[Plan, bool]:
    """The largest busy time as their mean plus ``E >= B_d - mean`` for every device ``d``
    (on two devices ``E >= +-(B0 - B1) / 2``), the mean in the objective on the columns
    themselves, the link rows left out. Its optimum is a lower bound on the cycle time of
    every placement, and the cycle time of its own placement where no link's load exceeds
    the largest busy time (the second value, True): then that placement is optimal. The same
    optimum as above, stated so that HiGHS's reduced costs act on the placement's columns
    (docs/measurements/tool_speed_epyc.md)."""
    m = Model()
    ld = loads(m, ctx)
    e = m.var(cost=1.0)
    cols = set().union(*ld.busy)
    mean = {col: sum(b.get(col, 0.0) for b in ld.busy) / ctx.n_dev for col in cols}
    for col, t in mean.items():
        m.cost[col] += t
    for b in ld.busy:  # E >= B_d - mean
        diff = {col: mean[col] - b.get(col, 0.0) for col in cols}
        m.row({e: 1.0, **{col: v for col, v in diff.items() if v}}, 0)
    plan, objective = solve(m, ld.x, ctx, options)
    # At most the objective: the transfers of the placement are at most the model's.
    return plan, US * plan.objective <= objective * (1 + 1e-7) + 1e-6


def solve(m: Model, x: list[list[int]], ctx: PlanContext, options: dict | None
          ) -> tuple[Plan, float]:
    """The plan of ``m``'s solution and ``m``'s objective (microseconds; inf where HiGHS
    stopped before it completed the start)."""
    values, objective, seconds, status = m.solve(ctx.time_limit_s, ctx.mip_gap, ctx.incumbent,
                                                 start_values(x, ctx), options=options)
    chosen = placement(x, values, ctx.start)
    plan = solved(chosen, cycle_time(ctx.graph, chosen, ctx.times, ctx.link, ctx.n_dev,
                                     ctx.comm_on_device), m, seconds, status)
    return plan, objective


def loads(m: Model, ctx: PlanContext) -> Loads:
    """The assignment, memory and transfer columns and rows of the MILP above, and what
    each column adds to each device's busy time and links."""
    g, n_dev = ctx.graph, ctx.n_dev
    x = assignment(m, len(g.kernels), n_dev)
    memory_rows(m, x, ctx)
    busy = [{x[k][d]: US * t[d] for k, t in enumerate(ctx.times)} for d in range(n_dev)]
    out = [dict() for _ in range(n_dev)]
    into = [dict() for _ in range(n_dev)]
    sends: dict[tuple[str, int], dict[int, float]] = {}
    for b, size in g.buffer_bytes.items():
        s = g.source(b)
        readers = list(g.readers.get(b, ()))
        if not readers and b not in g.outputs:
            continue
        cost = US * ctx.link.seconds(size)
        for d in range(n_dev):
            if s is None and d == HOME:
                continue  # it is already home
            r = m.var(0, 1)
            for v in readers:
                m.row([(r, 1.0), (x[v][d], -1.0)] + ([(x[s][d], 1.0)] if s is not None else []),
                      0)
            if b in g.outputs and d == HOME:
                m.row([(r, 1.0)] + ([(x[s][d], 1.0)] if s is not None else []), 1)
            into[d][r] = into[d].get(r, 0.0) + cost
            for e in range(n_dev):
                if e == d:
                    continue
                if s is None:
                    if e == HOME:  # sent from home
                        out[e][r] = out[e].get(r, 0.0) + cost
                    continue
                if n_dev == 2:  # received on d means sent from the other device
                    out[e][r] = cost
                    continue
                w = m.var(0, 1)
                m.row({w: 1.0, x[s][e]: -1.0}, hi=0)  # only from where it is
                sends.setdefault((b, d), {})[w] = 1.0
                out[e][w] = cost
            if (b, d) in sends:  # a receive is one send
                m.row({**sends[b, d], r: -1.0}, 0, 0)
    for d in range(n_dev):  # a device's share of its transfers occupies it
        for col, t in [*into[d].items(), *out[d].items()]:
            busy[d][col] = busy[d].get(col, 0.0) + ctx.comm_on_device * t
    return Loads(x, busy, out, into)
