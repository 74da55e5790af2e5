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

A period of identical layers on two devices (``PlanContext.layer``) is solved with the layers
counted instead of placed (``_layers``): the same optimum, from three small MILPs (one carried
stream), or from eight and then this MILP from their best (two).
"""

from __future__ import annotations

from collections.abc import Callable

from pimbuild.core.milp import US, Model
from pimbuild.targets.gpus.costmodel.cost import cycle_time
from pimbuild.targets.gpus.costmodel.ddg import HOME
from pimbuild.targets.gpus.planners import (
    Plan,
    PlanContext,
    _layers,
    memory_rows,
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


def per_kernel(ctx: PlanContext, options: dict | None = None) -> Plan:
    """The MILP above; ``options``: more HiGHS options (``Model.solve``)."""
    g, n_dev = ctx.graph, ctx.n_dev
    m = Model()
    c = m.var(cost=1.0)
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
    for d in range(n_dev):
        m.row([(c, 1.0)] + [(col, -t) for col, t in busy[d].items()]
              + [(col, -ctx.comm_on_device * t) for col, t in into[d].items()]
              + [(col, -ctx.comm_on_device * t) for col, t in out[d].items()], 0)
        m.row({c: 1.0, **{col: -t for col, t in out[d].items()}}, 0)
        m.row({c: 1.0, **{col: -t for col, t in into[d].items()}}, 0)
    values, _, seconds, status = m.solve(ctx.time_limit_s, ctx.mip_gap, ctx.incumbent,
                                         start_values(x, ctx), options=options)
    chosen = placement(x, values, ctx.start)
    return solved(chosen, cycle_time(g, chosen, ctx.times, ctx.link, n_dev, ctx.comm_on_device),
                  m, seconds, status)
