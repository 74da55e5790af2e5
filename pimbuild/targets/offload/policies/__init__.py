"""Policies: which units a target runs, with the reason and the numbers behind each choice.

A policy is a function ``place(ctx: PolicyContext) -> Placement``. ``policy.name`` picks it
from ``POLICIES``: a module ``pimbuild/targets/offload/policies/<name>.py`` whose ``place`` it is, a
``register``-ed function, or ``package.module:function``. Built in: ``torchpim`` (the paper's
rule), ``operator`` (the rule per torch operator), ``cpu`` (nothing offloaded), ``joint`` (the
exact minimum of the simulated hybrid time), ``oracle`` (``joint``'s optimum, or a local
search for a copy model of one's own). A policy may read any field of ``ctx``; everything in it is
part of the decide stage's key. A policy with options of its own declares a dataclass ``Options``
in its module; ``policy.options`` holds their values, checked like a config group, and the policy
reads them as ``ctx.policy.options``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pimbuild.core.registry import Registry
from pimbuild.targets.offload.protocol import PolicyParams  # the policy group's (re-exported)

if TYPE_CHECKING:
    from pimbuild.targets.offload.copymodels import CopyModel
    from pimbuild.targets.offload.nests import Nest
    from pimbuild.targets.offload.protocol import OffloadTarget

POLICIES = Registry("policy", "policy.name", package="pimbuild.targets.offload.policies",
                    attribute="place", options="policy.options")


@dataclass(frozen=True)
class PolicyContext:
    nests: list[Nest]  # in program order
    forward_s: float  # median forward time on the host
    outputs: set[str]  # allocations of the function's results
    b_cpu_gbps: float
    policy: PolicyParams
    target: OffloadTarget
    copy_model: CopyModel  # the oracle and the simulator weigh data movement with it

    def with_units(self, units: int) -> PolicyContext:
        """The same context on a target of another size (the report's cores sweep)."""
        return PolicyContext(self.nests, self.forward_s, self.outputs, self.b_cpu_gbps,
                             self.policy, self.target.with_units(units), self.copy_model)


@dataclass
class Decision:
    id: int
    target: str  # the target's host or device side
    decided_by: str  # the condition that decided it
    reason: str
    quantities: dict[str, Any] = field(default_factory=dict)
    # The deciding measurement lies within its own run-to-run spread of a threshold, so another
    # run on this host may decide the other way (docs/design.md §7).
    borderline: bool = False


@dataclass
class Placement:
    params: dict[str, Any]  # the numbers the policy decided with (decisions.json "params")
    decisions: list[Decision]

    def offloaded(self, ctx: PolicyContext) -> set[int]:
        return {d.id for d in self.decisions if d.target == ctx.target.device}


Policy = Callable[[PolicyContext], Placement]


def place(name: str, ctx: PolicyContext) -> Placement:
    return POLICIES.get(name)(ctx)


def write(path: Path, name: str, placement: Placement, ctx: PolicyContext) -> None:
    path.write_text(json.dumps({
        "policy": name, "params": placement.params,
        "offloaded": sorted(placement.offloaded(ctx)),
        "borderline": sorted(d.id for d in placement.decisions if d.borderline),
        "decisions": [d.__dict__ for d in placement.decisions]}, indent=2) + "\n")
