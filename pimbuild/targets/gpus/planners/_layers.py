"""The throughput MILP over a period of identical layers on two devices, with the layers
aggregated (docs/design.md §10).

``ddg.unroll`` copies one layer's graph ``N`` times. Per kernel (``throughput``), the MILP has
``N`` near-identical blocks of binaries, and its LP relaxation (every kernel split in one
proportion) leaves branch-and-bound a partition problem that takes seconds to close at N = 30.
Layers are interchangeable, so here they are counted instead of placed:

- A *group* of ``n`` layers has, per kernel ``k``, an integer ``y[k]`` in ``[0, n]``: in how
  many of its layers ``k`` runs on device 1. Compute is linear in ``y``.
- Over a group, a buffer written by ``s`` is received on device 1 at least ``y[v] - y[s]``
  times for each reader ``v``, on device 0 at least ``y[s] - y[v]`` times, and at least
  ``y[s]`` times if it is a result that goes home. The *nested* layers (layer ``j`` of the
  group has ``k`` on device 1 iff ``j < y[k]``) meet all these bounds at once: in layer ``j``
  the buffer is received on device 1 iff ``y[s] <= j < max_v y[v]``. So the least cost of a
  group is a function of its ``y``, and the MILP over ``y`` is exact.
- An input every layer reads from home is sent once per period (``ddg.unroll`` shares it):
  a binary ``z`` with ``n z >= y[v]``.
- The carried hidden state crosses layers: layer ``j`` reads it where layer ``j - 1``'s exit
  kernel ``w`` (its writer) ran. A layer is then a pattern with an entry side and an exit
  side, and a period a cycle of patterns, each entering where the one before it exits (a
  closed walk over the two sides). Either every layer exits on the same device: one group of
  ``N`` layers with ``y[w]`` fixed at 0 or at ``N`` and each layer entering where it exits;
  or some layer enters on 0 and exits on 1, and another enters on 1 and exits on 0: those
  two as groups of one with their entry fixed, and the other ``N - 2`` layers as a group
  whose layers enter where they exit (the nested layers of that group do). In that order
  the cycle closes: the 0 -> 1 layer, the group's layers that exit on 1, the 1 -> 0 layer,
  the group's layers that exit on 0. Every placement of the period falls in one of the
  three cases and costs at least that case's MILP optimum, so the least of the three is the
  per-kernel MILP's optimum.

Two streams written by two kernels (an MMDiT block's image and text streams) make a layer's
exit a state of two sides (``cases``). Where one stream changes device and the other stays on
one, the three groups above with the other's exit fixed are exact; so is one group where
every stream stays. Where both change, the per-kernel MILP runs last, from the best of those
as its start: its own bound closes slowly on a whole model, so the optimum of one group of
all the layers, each entering where it exits (``floor``: a lower bound on every period),
bounds it, and it is skipped when the cases already meet that bound. (Counting that last
case too, as a walk over the four exit states with a group per pair of states, was exact and
slower: docs/design.md §10.)

It applies when at most ``STREAMS`` kernels write what the layer carries and nothing in the
layer reads that (``applies``); otherwise ``throughput`` solves per kernel.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from pimbuild.core.milp import INF, US, Model
from pimbuild.targets.gpus.costmodel.cost import cycle_time
from pimbuild.targets.gpus.costmodel.ddg import Graph
from pimbuild.targets.gpus.planners import GB, Plan, PlanContext, relative_gap

ENTRY = -1  # a buffer's source: the exit kernel of the layer before
STREAMS = 2  # carried streams written by different kernels counted (2**STREAMS exit states)
# HiGHS's root cuts close little of these models' gap (what is left is whole layers against
# the transfers a split layer costs) and take most of their time: GPT-J, H100 + RTX Pro 6000,
# 1,203 cuts moved the root bound from 3827.5 to 3829.1 of the optimum's 3833.1 in 0.9 s.
# So no restart after presolve (it repeated those cuts), a cut pool of at most 10 and no
# reduced-cost fixing at the root: 60 periods of the bench's models and pairs 43.5 s ->
# 18.3 s in all, the slowest 1.8 s -> 1.0 s; 75 held out (the second device's kernel times
# scaled) 64.4 s -> 27.1 s, the slowest 2.5 s -> 1.1 s; the same optima (docs/design.md §10).
OPTIONS = {"mip_allow_restart": False, "mip_pool_soft_limit": 10,
           "mip_heuristic_run_root_reduced_cost": False}
# With a cutoff (``objective_bound``) HiGHS 1.16 ran RENS and RINS sub-MIPs at the root
# without end, past its time limit, on some cutoffs and not others (MMDiT, 24 layers, A100 +
# L40S: 118507.5 and 118507.6 hung, 118507.613 and 118506 took 0.4 s); with either off it
# did not. The per-kernel MILP started from the cases' best hung the same way (MMDiT, 24
# layers) and did not with both off. The later cases mostly prove that they cannot beat the
# cutoff; the per-kernel MILP's start is already the cases' best.
NO_SUBMIP = {"mip_heuristic_run_rens": False, "mip_heuristic_run_rins": False}
CUTOFF_OPTIONS = {**OPTIONS, **NO_SUBMIP}
# the throughput planner's per-kernel MILP (``throughput.per_kernel``: context, HiGHS options)
PerKernel = Callable[[PlanContext, dict], Plan]


@dataclass(frozen=True)
class Buffer:
    us: float  # one transfer, in microseconds (``milp.US``)
    source: int | None  # a kernel of the same layer, ENTRY, or None: home, for every layer
    readers: tuple[int, ...]
    home: bool  # a result that must reach the home device
    writer: int | None = None  # ENTRY: the kernel that writes it in the layer before


@dataclass(frozen=True)
class Group:
    n: int  # layers it stands for
    y: list[int]  # column per kernel: in how many of the group's layers it is on device 1
    # Per exit kernel (the writer of a carried stream): the device its stream enters from;
    # a stream not named enters where the layer exits it.
    entry: dict[int, int]


def carried(g: Graph) -> list[str]:
    """The layer's results that the next layer reads (not the same layer's state)."""
    return [o for b, o in g.carry.items() if b not in g.state]


def writers(g: Graph) -> set[int | None]:
    """The kernels writing what the layer carries (None: a carried result no kernel writes)."""
    return {g.producer.get(o) for o in carried(g)}


def applies(ctx: PlanContext) -> bool:
    g = ctx.layer
    if g is None or ctx.n_dev != 2 or ctx.period < 2:
        return False
    return len(writers(g)) <= STREAMS and None not in writers(g) and not any(
        g.readers.get(o) for o in carried(g))


def buffers(g: Graph, ctx: PlanContext) -> list[Buffer]:
    out = []
    for b, size in g.buffer_bytes.items():
        readers, home = g.readers.get(b, ()), b in g.outputs
        entry = b in g.carry and b not in g.state
        source = ENTRY if entry else g.source(b)
        if readers or (home and source is not None):
            out.append(Buffer(US * ctx.link.seconds(size), source, readers, home,
                              g.producer.get(g.carry[b]) if entry else None))
    return out


def source_terms(buf: Buffer, group: Group) -> tuple[list[int], float]:
    """In how many of the group's layers the buffer's source is on device 1, as columns
    plus a constant."""
    if buf.source != ENTRY:
        return [group.y[buf.source]], 0.0
    if buf.writer not in group.entry:
        return [group.y[buf.writer]], 0.0
    return [], float(group.entry[buf.writer] * group.n)


def receives(m: Model, buf: Buffer, group: Group, received: tuple[dict, dict]) -> None:
    """The buffer's receives on each device over the group's layers, at their lower bounds."""
    s, const = source_terms(buf, group)
    on1, on0 = m.var(0, group.n), m.var(0, group.n)
    for v in buf.readers:
        m.row([(on1, 1.0), (group.y[v], -1.0)] + [(c, 1.0) for c in s], lo=-const)
        m.row([(on0, 1.0), (group.y[v], 1.0)] + [(c, -1.0) for c in s], lo=const)
    if buf.home:
        m.row([(on0, 1.0)] + [(c, -1.0) for c in s], lo=const)
    received[0][on0], received[1][on1] = buf.us, buf.us


def shared(m: Model, buf: Buffer, groups: list[Group], received: tuple[dict, dict]) -> None:
    """An input from home that every layer reads: sent to device 1 once if any layer reads
    it there."""
    z = m.var(0, 1, binary=True)
    for group in groups:
        for v in buf.readers:
            m.row([(z, float(group.n)), (group.y[v], -1.0)], lo=0)
    received[1][z] = buf.us


# (layers, entry, exit) of a group: per exit kernel, the device its stream enters from and
# the one it exits on (fixed); a stream not named enters where it exits, and exits anywhere.
Spec = tuple[int, dict[int, int], dict[int, int]]


def model(ctx: PlanContext, bufs: list[Buffer], spec: list[Spec]) -> tuple[Model, list[Group]]:
    """The MILP of one case: a ``Spec`` per group."""
    n_k = len(ctx.layer.kernels)
    t = ctx.times[:n_k]
    m = Model()
    c = m.var(cost=1.0)
    groups = []
    for n, entry, exit_on in spec:
        y = [m.var(0, n, integer=True) for _ in range(n_k)]
        for w, side in exit_on.items():
            m.lower[y[w]] = m.upper[y[w]] = float(side * n)
        groups.append(Group(n, y, entry))
    received: tuple[dict, dict] = ({}, {})
    for buf in bufs:
        if buf.source is None:
            shared(m, buf, groups, received)
        else:
            for group in groups:
                receives(m, buf, group, received)
    moved = [(col, -ctx.comm_on_device * sec) for side in received for col, sec in side.items()]
    ys = [(group, k) for group in groups for k in range(n_k)]
    if ctx.capacity is not None:  # device 1 holds r_k in y[k] layers, device 0 in n - y[k]
        r = [GB * b for b in ctx.resident[:n_k]]
        if ctx.capacity[1] != INF:
            m.row([(g.y[k], r[k]) for g, k in ys if r[k]], hi=GB * ctx.capacity[1])
        if ctx.capacity[0] != INF:
            m.row([(g.y[k], -r[k]) for g, k in ys if r[k]],
                  hi=GB * ctx.capacity[0] - sum(g.n * r[k] for g, k in ys))
    m.row([(c, 1.0)] + [(g.y[k], -US * t[k][1]) for g, k in ys] + moved, lo=0)
    m.row([(c, 1.0)] + [(g.y[k], US * t[k][0]) for g, k in ys] + moved,
          lo=sum(g.n * US * t[k][0] for g, k in ys))
    for side in received:
        m.row([(c, 1.0)] + [(col, -sec) for col, sec in side.items()], lo=0)
    return m, groups


def nested(group: Group, values) -> list[list[int]]:
    """The group's layers: layer ``j`` has kernel ``k`` on device 1 iff ``j < y[k]``."""
    y = [round(values[col]) for col in group.y]
    return [[int(j < yk) for yk in y] for j in range(group.n)]


def cases(n: int, ws: list[int]) -> list[list[Spec]]:
    """The MILPs over the periods where at most one stream changes device (``ws``: the exit
    kernels): one stream changes while the others stay on one device (the three groups of the
    module docstring, the others' exits fixed), then every stream stays. With one stream that
    is every period."""
    if not ws:  # nothing carried: one group
        return [[(n, {}, {})]]
    out = []
    for w in ws:
        others = [v for v in ws if v != w]
        for sides in itertools.product((0, 1), repeat=len(others)):
            fixed = dict(zip(others, sides, strict=True))
            out.append([(n - 2, fixed, fixed), (1, {**fixed, w: 0}, {**fixed, w: 1}),
                        (1, {**fixed, w: 1}, {**fixed, w: 0})])
    return out + [[(n, {}, dict(zip(ws, sides, strict=True)))]
                  for sides in itertools.product((0, 1), repeat=len(ws))]


def period(groups: list[Group], values) -> list[int]:
    """The placement of the period's layers, in an order where each layer enters where the
    one before it exits."""
    if len(groups) == 3:  # one stream changes device (``cases``)
        w = next(v for v in groups[1].entry if v not in groups[0].entry)
        rest, up, down = (nested(g, values) for g in groups)
        layers = up + [x for x in rest if x[w]] + down + [x for x in rest if not x[w]]
    else:
        layers = nested(groups[0], values)
    return [d for layer in layers for d in layer]


def solve(m: Model, ctx: PlanContext, deadline: float, cutoff: float | None):
    """``Model.solve`` within what is left of the planner's time limit. A case HiGHS stopped
    without a placement is skipped when the planner may return its best (``incumbent``), with
    no bound (0)."""
    left = deadline - time.perf_counter()
    try:
        if left <= 0:
            raise RuntimeError("HiGHS ended with Time limit reached")
        return m.solve(left, ctx.mip_gap, ctx.incumbent, cutoff=cutoff,
                       options=OPTIONS if cutoff is None else CUTOFF_OPTIONS)
    except RuntimeError as e:
        if not ctx.incumbent:
            raise
        return None, INF, 0.0, {"status": str(e).removeprefix("HiGHS ended with "),
                                "bound": 0.0}


def floor(ctx: PlanContext, bufs: list[Buffer], deadline: float) -> tuple[float, float]:
    """A lower bound on every period's cycle time (microseconds) and the seconds it took:
    one group of all the layers, each entering where it exits. Over a cycle of layers a
    stream enters on device 1 as often as it exits there, so every placement costs at least
    this group's optimum."""
    m, _ = model(ctx, bufs, [(ctx.period, {}, {})])
    # Out of time with nothing found, ``solve`` gives no bound (0) instead of failing.
    values, _, took, status = solve(m, replace(ctx, incumbent=True), deadline, None)
    return (status["bound"] if values is not None else 0.0), took


def both_change(ctx: PlanContext, bufs: list[Buffer], deadline: float,
                best: tuple[list[int], float] | None, per_kernel: PerKernel
                ) -> tuple[Plan | None, float, float, str]:
    """The periods where two or more streams change device: ``per_kernel`` (the throughput
    planner's per-kernel MILP) from the best placement so far, unless ``floor`` shows nothing
    beats it. (its plan or None, the bound on every period in microseconds, seconds, HiGHS's
    status)."""
    low, took = floor(ctx, bufs, deadline)
    if best is not None and US * best[1] <= low * (1 + ctx.mip_gap + 1e-9):
        return None, low, took, "Optimal"
    left = max(0.0, deadline - time.perf_counter())
    start = tuple(best[0]) if best is not None else ctx.start
    try:
        plan = per_kernel(replace(ctx, time_limit_s=left, start=start), NO_SUBMIP)
    except RuntimeError as e:  # out of time before HiGHS took the start: keep the cases' best
        if not ctx.incumbent or best is None:
            raise
        return None, low, took, str(e).removeprefix("HiGHS ended with ")
    status = plan.info["solver_status"]
    return plan, max(low, US * plan.info["bound_s"]), took + plan.solve_s, status


def place(ctx: PlanContext, per_kernel: PerKernel) -> Plan:
    """The aggregated MILP over each case of ``cases``; where two or more streams change
    device, ``per_kernel`` too (``both_change``)."""
    g = ctx.layer
    ws = sorted(writers(g))  # the exit kernels (``applies``: at most STREAMS)
    bufs = buffers(g, ctx)
    deadline = time.perf_counter() + ctx.time_limit_s
    best, cutoff, bound, size, statuses, seconds = None, None, INF, [0, 0], [], 0.0
    for spec in cases(ctx.period, ws):  # each after the first only for a better placement
        m, groups = model(ctx, bufs, spec)
        values, objective, took, status = solve(m, ctx, deadline, cutoff)
        bound = min(bound, status["bound"] / US)
        size = [size[0] + len(m.cost), size[1] + len(m.rows)]
        statuses.append(status["status"])
        seconds += took
        if values is None:
            continue
        chosen = period(groups, values)
        achieved = cycle_time(ctx.graph, chosen, ctx.times, ctx.link, 2, ctx.comm_on_device)
        if best is None or achieved < best[1]:
            best, cutoff = (chosen, achieved), objective
    if len(ws) > 1:
        plan, low, took, status = both_change(ctx, bufs, deadline, best, per_kernel)
        bound, seconds = low / US, seconds + took  # it bounds every period
        statuses.append(status)
        if plan is not None:
            size = [size[0] + plan.info["variables"], size[1] + plan.info["constraints"]]
            if best is None or plan.objective < best[1]:
                best = plan.place, plan.objective
    if ctx.start is not None and ctx.fits(ctx.start):  # never worse than the start
        start = cycle_time(ctx.graph, list(ctx.start), ctx.times, ctx.link, 2,
                           ctx.comm_on_device)
        if best is None or start < best[1]:
            best = list(ctx.start), start
    if best is None:
        raise RuntimeError(f"HiGHS ended with {statuses[0]}")
    chosen, achieved = best
    status = next((s for s in statuses if s not in ("Optimal", "Cut off")), "Optimal")
    return Plan(chosen, achieved, seconds, {
        "formulation": f"{ctx.period} layers aggregated ({len(statuses)} case(s)"
                       + (", then per kernel" if len(ws) > 1 else "") + ")",
        "variables": size[0], "constraints": size[1], "solver_status": status,
        "bound_s": bound, "gap": relative_gap(achieved, bound)})
