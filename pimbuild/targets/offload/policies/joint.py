"""Policy ``joint``: the placement with the smallest T_hybrid (paper eq. 9) under the target's
model, exactly: every placement of the nests is considered, with the copy model's bytes and
the switch cost of every region (docs/design.md §7).

``sim.copy_model=upper_bound`` (eq. 8): the cost of a placement is the host nests' time plus,
per segment (maximal run of consecutive offloaded nests of one scope, ``loops.scopes``), its
device time, its copies (a function of that segment alone) and two switches per run of it.
So the optimum is a shortest path over segment boundaries: node ``k`` = "nest ``k`` runs on
the host" (or starts another scope), an arc ``k -> k+1`` keeps nest ``k+1`` on the host, an
arc ``k -> l+1`` offloads nests ``k+1..l`` as one segment and keeps nest ``l+1`` on the host.
An exact dynamic program over O(n^2) segments; a segment's copies are extended nest by nest
(``copymodels.segment_bytes``, the function ``upper_bound`` itself sums), so each costs only
its last nest's buffers.

``sim.copy_model=resident``: a buffer moves when a nest reads it on the side that does not
hold its latest version; the cost is not a sum over segments, so the optimum is a MILP
(HiGHS). Binary ``y_i`` (nest ``i`` offloaded); ``s_i >= y_i - y_{i-1}`` (a segment starts:
two switches). For every buffer, between one write (by ``w``, or the start: the host) and
the next, the first reader on the other side than ``w`` pays one copy (its bytes times its
invocations) and afterwards both sides hold it:

    opp_j = |y_rj - y_w|  (exactly: y_r + y_w - 2 p,  p >= y_r + y_w - 1, p <= y_r, p <= y_w)
    u_j >= u_{j-1},  u_j >= opp_j,  u_j <= u_{j-1} + opp_j,  u_j <= 1     (u_0 = 0)
    copy bytes += sum_j bytes_j (u_j - u_{j-1})

A result written last on the device and read on the host by nobody after is flushed at the
end: ``e >= y_w - h``, ``h <= sum (1 - y_r)``, ``h <= 1``. Both are checked against brute
force in the tests. Other copy models are refused.
"""

from __future__ import annotations

from pimbuild.core.errors import ConfigError
from pimbuild.core.milp import US, Model
from pimbuild.targets.offload.copymodels import segment_bytes
from pimbuild.targets.offload.nests import Nest
from pimbuild.targets.offload.policies import Decision, Placement, PolicyContext
from pimbuild.targets.offload.policies.torchpim import rule_params

COPY_MODELS = ("upper_bound", "resident")


def place(ctx: PolicyContext) -> Placement:
    offloaded, seconds = optimum(ctx)
    decisions = []
    for n in ctx.nests:
        side = ctx.target.device if n.id in offloaded else ctx.target.host
        q = {"t_cpu_s": n.t_cpu_s, f"t_{ctx.target.device}_s": ctx.target.unit_time(n)}
        decisions.append(Decision(n.id, side, "joint", f"the exact minimum of T_hybrid "
                                  f"({ctx.copy_model.name} copies) places it on {side}", q))
    return Placement({**rule_params(ctx).record(), "solve_s": seconds}, decisions)


def optimum(ctx: PolicyContext) -> tuple[set[int], float]:
    """The offloaded nest ids of the smallest T_hybrid, and the seconds it took to find."""
    import time

    began = time.perf_counter()
    if ctx.copy_model.name == "upper_bound":
        best = by_segments(ctx)
    elif ctx.copy_model.name == "resident":
        best = by_milp(ctx)
    else:
        raise ConfigError(f"policy=joint supports sim.copy_model "
                          f"{' or '.join(COPY_MODELS)}, not {ctx.copy_model.name}")
    return best, time.perf_counter() - began


def by_segments(ctx: PolicyContext) -> set[int]:
    """Shortest path over segment boundaries (``upper_bound`` copies)."""
    nests, t = ctx.nests, ctx.target
    n = len(nests)
    host = [x.t_cpu_s for x in nests]
    device = [t.unit_time(x) for x in nests]
    # best[k]: the least cost of nests 0..k-1 with nest k-1 on the host (k = 0: nothing yet)
    best, came = [0.0] + [float("inf")] * n, [None] * (n + 1)
    finish, finish_from = float("inf"), None  # ending with a segment that runs to the end
    for k in range(n):  # nest k on the host after best[k] ...
        if best[k] + host[k] < best[k + 1]:
            best[k + 1], came[k + 1] = best[k] + host[k], (k, None)
        run = 0.0
        # ... or nests k..last offloaded as one segment (its copies extended nest by nest;
        # inside one scope, entered and left once per run of its first nest)
        switches = t.switch_time(2 * max(nests[k].invocations, 1))
        for last, (fetch, flush) in enumerate(segment_bytes(nests[k:]), start=k):
            if nests[last].scope != nests[k].scope:
                break
            run += device[last]
            cost = best[k] + run + t.copy_time(fetch, flush) + switches
            if last + 1 == n:
                if cost < finish:
                    finish, finish_from = cost, (k, n)
                continue
            if cost + host[last + 1] < best[last + 2]:
                best[last + 2] = cost + host[last + 1]
                came[last + 2] = (k, last + 1)
            if nests[last + 1].scope != nests[k].scope and cost < best[last + 1]:
                best[last + 1] = cost  # the next scope may start a segment of its own
                came[last + 1] = (k, last + 1)
    offloaded: set[int] = set()
    k = n
    if finish < best[n]:
        start, k = finish_from
        offloaded |= {x.id for x in nests[start:]}
        k = start
    while k > 0:
        start, seg_end = came[k]
        if seg_end is not None:  # a segment start..seg_end-1, then nest seg_end on the host
            offloaded |= {x.id for x in nests[start:seg_end]}
        k = start
    return offloaded


def by_milp(ctx: PolicyContext) -> set[int]:
    """The ``resident`` copy model's optimum as a MILP."""
    nests, t = ctx.nests, ctx.target
    m = Model()
    y = [m.var(0, 1, binary=True) for _ in nests]
    cost: dict[int, float] = {}  # column -> microseconds per unit

    def add(col: int, us: float) -> None:
        cost[col] = cost.get(col, 0.0) + us

    for i, x in enumerate(nests):
        add(y[i], US * (t.unit_time(x) - x.t_cpu_s))
        s = m.var(0, 1)  # a segment starts here: after a host nest, or in a new scope
        joined = i and nests[i - 1].scope == x.scope
        m.row({s: 1.0, y[i]: -1.0, **({y[i - 1]: 1.0} if joined else {})}, 0)
        add(s, US * t.switch_time(2 * max(x.invocations, 1)))
    per_byte = US * t.copy_time(1, 0)
    for alloc, intervals in _intervals(nests).items():
        for writer, readers, final_bytes in intervals:
            prev = None
            for r, nbytes in readers:
                opp = _differs(m, y[r], None if writer is None else y[writer])
                minus = {c: -v for c, v in opp.items()}
                u = m.var(0, 1)  # some reader so far is on the other side
                m.row({u: 1.0, **minus}, lo=0)  # u_j >= opp_j
                if prev is not None:
                    m.row({u: 1.0, prev: -1.0}, lo=0)  # u_j >= u_{j-1}
                    m.row({u: 1.0, prev: -1.0, **minus}, hi=0)  # u_j <= u_{j-1} + opp_j
                    add(prev, -per_byte * nbytes)
                else:
                    m.row({u: 1.0, **minus}, hi=0)
                add(u, per_byte * nbytes)  # bytes_j (u_j - u_{j-1})
                prev = u
            if final_bytes and writer is not None and alloc in ctx.outputs:
                h, e = m.var(0, 1), m.var(0)
                m.row({h: 1.0, **{y[r]: 1.0 for r, _ in readers}}, hi=len(readers))
                m.row({e: 1.0, y[writer]: -1.0, h: 1.0}, lo=0)
                add(e, per_byte * final_bytes)
    for col, us in cost.items():
        m.cost[col] = us
    values, _, _, _ = m.solve(time_limit_s=60.0)
    return {x.id for i, x in enumerate(nests) if values[y[i]] > 0.5}


def _differs(m: Model, yr: int, yw: int | None) -> dict[int, float]:
    """|y_r - y_w| as a linear expression {column: coefficient}; y_w None: the host (0)."""
    if yw is None:
        return {yr: 1.0}
    p = m.var(0, 1)  # y_r * y_w, exact for binary y
    m.row({p: 1.0, yr: -1.0}, hi=0)
    m.row({p: 1.0, yw: -1.0}, hi=0)
    m.row({p: 1.0, yr: -1.0, yw: -1.0}, lo=-1)
    return {yr: 1.0, yw: 1.0, p: -2.0}


def _intervals(nests: list[Nest]) -> dict[str, list[tuple[int | None, list[tuple[int, int]],
                                                          int]]]:
    """Per allocation, its intervals between writes in program order: (writer index or None
    for the start, [(reader index, bytes x invocations)], the allocation's bytes if this is
    the last interval else 0)."""
    out: dict[str, list] = {}
    current: dict[str, tuple[int | None, list]] = {}
    size: dict[str, int] = {}
    for i, x in enumerate(nests):
        times = max(x.invocations, 1)
        for alloc, nbytes in x.reads.items():
            size[alloc] = nbytes
            current.setdefault(alloc, (None, []))[1].append((i, times * nbytes))
        for alloc, nbytes in x.writes.items():
            size[alloc] = nbytes
            if alloc in current:
                out.setdefault(alloc, []).append((*current[alloc], 0))
            current[alloc] = (i, [])
    for alloc, (writer, readers) in current.items():
        out.setdefault(alloc, []).append((writer, readers, size[alloc]))
    return out
