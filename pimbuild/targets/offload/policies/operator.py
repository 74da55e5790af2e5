"""Policy ``operator``: the paper's rule on each torch operator as a whole (its nests'
times, counts and traffic summed, its parallelism the largest of its nests'); every nest of
an operator gets the operator's decision."""

from __future__ import annotations

from pimbuild.targets.offload.nests import Nest
from pimbuild.targets.offload.policies import Decision, Placement, PolicyContext
from pimbuild.targets.offload.policies.torchpim import rule, rule_params


def _operator_signals(group: list[Nest]) -> tuple[float | None, float | None]:
    """Read bandwidth and store-bound of an operator as a whole (traffic over total time)."""
    t = sum(n.t_cpu_s for n in group)
    bw = None
    if all(n.bw_read_gbps is not None for n in group) and t > 0:
        bw = sum(n.bw_read_gbps * n.t_cpu_s for n in group) / t  # sum(n_rd * L) / sum(T)
    sb = None
    if all(n.store_bound is not None for n in group) and t > 0:
        sb = sum(n.store_bound * n.t_cpu_s for n in group) / t  # time-weighted
    return bw, sb


def _read_later(group: list[Nest], nests: list[Nest]) -> bool:
    """Whether a later nest of another operator reads a buffer the operator writes
    (``policy.c4=read_later`` at operator granularity)."""
    written = {b for n in group for b in n.writes}
    ids = {n.id for n in group}
    first = nests.index(group[0])
    return any(written & set(n.reads) for n in nests[first:] if n.id not in ids)


def place(ctx: PolicyContext) -> Placement:
    p = rule_params(ctx)
    groups: dict[str, list[Nest]] = {}
    for n in ctx.nests:
        groups.setdefault(n.operator, []).append(n)
    verdict = {}
    for op, group in groups.items():
        bw, sb = _operator_signals(group)
        work = sum(n.n_total * max(n.invocations, 1) for n in group)
        verdict[op] = rule(sum(n.t_cpu_s for n in group), work, 1,
                           max(n.n_iter for n in group), bw, sb, p,
                           _read_later(group, ctx.nests))
    side = {True: ctx.target.device, False: ctx.target.host}
    decisions = []
    for n in ctx.nests:
        offload, by, why, q = verdict[n.operator]
        decisions.append(Decision(n.id, side[offload], f"operator:{by}",
                                  f"operator {n.operator}: {why}", q))
    return Placement(p.record(), decisions)
