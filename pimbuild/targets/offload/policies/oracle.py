"""Policy ``oracle``: the placement with the lowest simulated hybrid time under the target's
model. For the built-in copy models it is ``joint``'s exact optimum; for a copy model of
one's own, the best ``pimbuild.targets.offload.hybrid.best_placement`` finds by local search
from the rule's
placements."""

from __future__ import annotations

from pimbuild.targets.offload import hybrid
from pimbuild.targets.offload.policies import (
    Decision,
    Placement,
    PolicyContext,
    joint,
    operator,
    torchpim,
)


def place(ctx: PolicyContext) -> Placement:
    if ctx.copy_model.name in joint.COPY_MODELS:
        best, _ = joint.optimum(ctx)
        how = "the exact minimum of"
    else:
        seeds = [policy.place(ctx).offloaded(ctx) for policy in (torchpim, operator)]
        best = hybrid.best_placement(ctx.nests, ctx.forward_s, ctx.target, ctx.copy_model,
                                     ctx.outputs, seeds)
        how = "the lowest (local search)"
    decisions = []
    for n in ctx.nests:
        q = {"t_cpu_s": n.t_cpu_s, f"t_{ctx.target.device}_s": ctx.target.unit_time(n)}
        side = ctx.target.device if n.id in best else ctx.target.host
        decisions.append(Decision(n.id, side, "oracle",
                                  f"{how} simulated T_hybrid places it on {side}", q))
    return Placement(torchpim.rule_params(ctx).record(), decisions)
