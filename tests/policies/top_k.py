"""A policy of one's own with one typed option (tests/test_plugin_options.py): offload the
``policy.options.k`` nests with the largest host time. This file is all it takes."""

from __future__ import annotations

from dataclasses import dataclass, field

from pimbuild.targets.offload.policies import Decision, Placement, PolicyContext


@dataclass(frozen=True)
class Options:
    k: int = field(default=1, metadata={"range": (">=", 1)})


def place(ctx: PolicyContext) -> Placement:
    k = ctx.policy.options.k
    top = {n.id for n in sorted(ctx.nests, key=lambda n: -n.t_cpu_s)[:k]}
    return Placement({"k": k}, [
        Decision(n.id, ctx.target.device if n.id in top else ctx.target.host, "top-k",
                 f"among the {k} largest T_cpu" if n.id in top else "not among them")
        for n in ctx.nests])
