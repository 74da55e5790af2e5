"""Policy ``cpu``: nothing offloaded (the CPU-only baseline)."""

from __future__ import annotations

from pimbuild.targets.offload.policies import Decision, Placement, PolicyContext
from pimbuild.targets.offload.policies.torchpim import rule_params


def place(ctx: PolicyContext) -> Placement:
    decisions = [Decision(n.id, ctx.target.host, "cpu", "policy cpu offloads nothing")
                 for n in ctx.nests]
    return Placement(rule_params(ctx).record(), decisions)
