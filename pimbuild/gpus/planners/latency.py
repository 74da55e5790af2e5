"""Planner ``latency``: the placement with the shortest critical path of one forward
(``pimbuild.gpus.cost.critical_path``), as a MILP (docs/design.md §10).

Variables: ``x[k][d]`` binary, start ``S_k``, ``F_k = S_k + sum_d t[k][d] x[k][d]``, a cut
indicator ``y`` per (source, reader) pair, and ``D[k][d]``, the time device ``d`` is free after
the kernels up to ``k`` in program order (one compute stream per request):

    S_k >= F_s + c_b y_{s,k}                 for each buffer b kernel k reads from kernel s < k
    S_k >= c_b y_{s,k}                       for a buffer entering at home or carried in
    y_{s,k} >= x[s][d] - x[k][d]             for every d
    D[k][d] >= D[k-1][d],  D[k][d] >= F_k - M (1 - x[k][d]),  S_k >= D[k-1][d] - M (1 - x[k][d])
    T >= F_k,  T >= F_s + c_b (1 - x[s][home])   for each result b written by s
    minimise T

For a fixed ``x`` the smallest feasible times are the in-order schedule ``critical_path``
computes, so the optimum equals the cost model's minimum (checked against brute force).
"""

from __future__ import annotations

from pimbuild.gpus.cost import critical_path
from pimbuild.gpus.ddg import HOME
from pimbuild.gpus.planners import Plan, PlanContext, solved, start_values
from pimbuild.gpus.planners.throughput import assignment, placement
from pimbuild.milp import US, Model


def place(ctx: PlanContext) -> Plan:
    g, n_dev = ctx.graph, ctx.n_dev
    times = [[t * US for t in row] for row in ctx.times]
    big = sum(max(t) for t in times) + \
        sum(US * ctx.link.seconds(n) for n in g.buffer_bytes.values())  # no time exceeds it
    m = Model()
    end = m.var(cost=1.0)
    x = assignment(m, len(g.kernels), n_dev)
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
    for k in range(len(g.kernels)):
        for s, b in g.predecessors(k):
            c_b = US * ctx.link.seconds(g.buffer_bytes[b])
            y = cut(s, k)
            if s is not None and s < k:
                m.row([(start[k], 1.0), (y, -c_b)] + [(c, -v) for c, v in finish(s)], 0)
            else:
                m.row([(start[k], 1.0), (y, -c_b)], 0)
        for d in range(n_dev):
            if free[d] is not None:
                m.row([(start[k], 1.0), (free[d], -1.0), (x[k][d], -big)], -big)
            nxt = m.var()
            if free[d] is not None:
                m.row([(nxt, 1.0), (free[d], -1.0)], 0)
            m.row([(nxt, 1.0), (x[k][d], -big)] + [(c, -v) for c, v in finish(k)], -big)
            free[d] = nxt
        m.row([(end, 1.0)] + [(c, -v) for c, v in finish(k)], 0)
    for b in g.outputs:
        s = g.source(b)
        if s is not None:
            c_b = US * ctx.link.seconds(g.buffer_bytes[b])
            m.row([(end, 1.0), (x[s][HOME], c_b)] + [(c, -v) for c, v in finish(s)], c_b)
    values, _, seconds, status = m.solve(ctx.time_limit_s, ctx.mip_gap, ctx.incumbent,
                                         start_values(x, ctx.start))
    chosen = placement(x, values)
    return solved(chosen, critical_path(g, chosen, ctx.times, ctx.link, n_dev), m, seconds,
                  status)
