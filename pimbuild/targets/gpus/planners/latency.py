"""Planner ``latency``: the placement with the shortest critical path of one forward
(``pimbuild.targets.gpus.costmodel.cost.critical_path``), as a MILP (docs/design.md §10).

Variables: ``x[k][d]`` binary, start ``S_k``, ``F_k = S_k + sum_d t[k][d] x[k][d]``, a cut
indicator ``y`` per (source, reader) pair, and ``D[k][d]``, the time device ``d`` is free after
the kernels up to ``k`` in program order (one compute stream per request):

    S_k >= F_s + c_b y_{s,k}                 for each buffer b kernel k reads from kernel s < k
    S_k >= c_b y_{s,k}                       for a buffer entering at home or carried in
    y_{s,k} >= x[s][d] - x[k][d]             for every d
    D[k][d] >= D[k-1][d] + t[k][d] x[k][d]   (d runs its kernels one after another)
    D[k][d] >= F_k - M_k (1 - x[k][d]),  S_k >= D[k-1][d] - M_k (1 - x[k][d])
    T >= F_k,  T >= D[last][d],  T >= F_s + c_b (1 - x[s][home])   for each result b of s
    minimise T

``M_k`` is the horizon up to ``k``: every kernel so far and every transfer they read, one
after another; no kernel up to ``k`` finishes later in the in-order schedule. For a fixed
``x`` the smallest feasible times are that schedule (``critical_path``), and every row holds
for it, so the optimum equals the cost model's minimum (checked against brute force). The
rows that a device runs its kernels in turn give the LP relaxation, which splits kernels
across devices and so loses the big-M rows, a bound on each device's load: random
40-kernel graphs 12-25 s -> 1.2-1.7 s (docs/measurements/gpus_latency_milp.md).
"""

from __future__ import annotations

from collections.abc import Callable

from pimbuild.core.milp import US, Model
from pimbuild.targets.gpus.costmodel.cost import critical_path
from pimbuild.targets.gpus.costmodel.ddg import HOME
from pimbuild.targets.gpus.planners import Plan, PlanContext, memory_rows, solved, start_values
from pimbuild.targets.gpus.planners.throughput import assignment, placement


def objective(ctx: PlanContext) -> Callable[[list[int]], float]:
    """What this planner minimises, the critical path of a placement of ``ctx``'s graph (the
    build compares start placements with it, ``decide.objective``)."""
    return lambda place: critical_path(ctx.graph, place, ctx.times, ctx.link, ctx.n_dev)


def place(ctx: PlanContext) -> Plan:
    g, n_dev = ctx.graph, ctx.n_dev
    times = [[t * US for t in row] for row in ctx.times]
    m = Model()
    end = m.var(cost=1.0)
    x = assignment(m, len(g.kernels), n_dev)
    memory_rows(m, x, ctx)
    start = [m.var() for _ in g.kernels]

    def finish(k: int) -> list[tuple[int, float]]:
        return [(start[k], 1.0)] + [(x[k][d], times[k][d]) for d in range(n_dev)]

    def cut(s: int | None, k: int) -> int:
        """1 when ``k`` is not where the buffer it reads from ``s`` (None: home) is."""
        y = m.var(0, 1)
        if s is None:
            m.row([(y, 1.0), (x[k][HOME], 1.0)], 1)
        else:
            for d in range(n_dev):
                m.row([(y, 1.0), (x[k][d], 1.0), (x[s][d], -1.0)], 0)
        return y

    free = [None] * n_dev
    horizon = 0.0  # no kernel up to k finishes later (each after all before it, received)
    for k in range(len(g.kernels)):
        for s, b in g.predecessors(k):
            c_b = US * ctx.link.seconds(g.buffer_bytes[b])
            horizon += c_b
            y = cut(s, k)
            if s is not None and s < k:
                m.row([(start[k], 1.0), (y, -c_b)] + [(c, -v) for c, v in finish(s)], 0)
            else:
                m.row([(start[k], 1.0), (y, -c_b)], 0)
        horizon += max(times[k])
        for d in range(n_dev):
            if free[d] is not None:
                m.row([(start[k], 1.0), (free[d], -1.0), (x[k][d], -horizon)], -horizon)
            nxt = m.var()
            if free[d] is not None:
                m.row([(nxt, 1.0), (free[d], -1.0), (x[k][d], -times[k][d])], 0)
            else:
                m.row([(nxt, 1.0), (x[k][d], -times[k][d])], 0)
            m.row([(nxt, 1.0), (x[k][d], -horizon)] + [(c, -v) for c, v in finish(k)],
                  -horizon)
            free[d] = nxt
        m.row([(end, 1.0)] + [(c, -v) for c, v in finish(k)], 0)
    for d in range(n_dev):  # the device runs its kernels one after another
        m.row([(end, 1.0), (free[d], -1.0)], 0)
    for b in g.outputs:
        s = g.source(b)
        if s is not None:
            c_b = US * ctx.link.seconds(g.buffer_bytes[b])
            m.row([(end, 1.0), (x[s][HOME], c_b)] + [(c, -v) for c, v in finish(s)], c_b)
    values, _, seconds, status = m.solve(ctx.time_limit_s, ctx.mip_gap, ctx.incumbent,
                                         start_values(x, ctx))
    chosen = placement(x, values, ctx.start)
    return solved(chosen, critical_path(g, chosen, ctx.times, ctx.link, n_dev), m, seconds,
                  status)
