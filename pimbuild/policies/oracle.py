"""Policy ``oracle``: the placement with the lowest simulated hybrid time under the target's
model (``pimbuild.hybrid.best_placement``), seeded with the rule's placements."""

from __future__ import annotations

from pimbuild import hybrid
from pimbuild.policies import Decision, Placement, PolicyContext, operator, torchpim


def place(ctx: PolicyContext) -> Placement:
    seeds = [policy.place(ctx).offloaded(ctx) for policy in (torchpim, operator)]
    best = hybrid.best_placement(ctx.nests, ctx.forward_s, ctx.target, ctx.copy_model,
                                 ctx.outputs, seeds)
    decisions = []
    for n in ctx.nests:
        q = {"t_cpu_s": n.t_cpu_s, "t_pim_s": ctx.target.unit_time(n)}
        side = ctx.target.device if n.id in best else ctx.target.host
        decisions.append(Decision(n.id, side, "oracle",
                                  f"lowest simulated T_hybrid places it on {side}", q))
    return Placement(torchpim.rule_params(ctx).__dict__, decisions)
