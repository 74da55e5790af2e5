"""Stage ``decide``: where every candidate nest runs, with the reason and the numbers.

The policy (``policy.name``, a policy of ``pimbuild.targets.offload.policies.POLICIES``)
gets the nests (extract's facts joined with profile's measurements), ``B_cpu`` from
calibrate, its own parameters and the target (``system.name``, ``pimbuild.targets``).
Writes ``decisions.json``: the policy, the numbers it decided with, the offloaded nest ids
and one decision per nest.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pimbuild import targets
from pimbuild.core.errors import ConfigError
from pimbuild.core.stage import Inputs, plain
from pimbuild.targets.offload import nests, policies
from pimbuild.targets.offload.copymodels import COPY_MODELS, CopyModel
from pimbuild.targets.offload.hostfacts import b_cpu
from pimbuild.targets.offload.policies import POLICIES, PolicyContext, PolicyParams
from pimbuild.targets.offload.policies.torchpim import C1_MODES, C4_MODES

NAME = "decide"
READS = ("extract", "profile", "calibrate")
WRITES = ("decisions.json",)


@dataclass(frozen=True)
class Params:
    policy: PolicyParams
    system: str  # the target's name
    target: Any  # the target (a frozen dataclass of its parameters)
    copy_model: CopyModel  # the oracle weighs data movement with it


def policy_params(cfg: DictConfig) -> PolicyParams:
    POLICIES.check(cfg.policy.name)
    if cfg.policy.c1 not in C1_MODES:
        raise ConfigError(f"policy.c1={cfg.policy.c1}: choose one of {', '.join(C1_MODES)}")
    if cfg.policy.c4 not in C4_MODES:
        raise ConfigError(f"policy.c4={cfg.policy.c4}: choose one of {', '.join(C4_MODES)}")
    values = plain(cfg.policy)
    values["options"] = POLICIES.options(cfg.policy.name, values.get("options"))
    return PolicyParams(**values)


def params(cfg: DictConfig) -> Params:
    options = COPY_MODELS.options(cfg.sim.copy_model, plain(cfg.sim.copy_model_options))
    return Params(policy=policy_params(cfg), system=cfg.system.name,
                  target=targets.from_config(cfg),
                  copy_model=CopyModel(cfg.sim.copy_model, options))


def context(inputs: Inputs, p: Params) -> PolicyContext:
    """The nests with their measurements, as the policy and the simulator see them."""
    ex, pr = inputs["extract"], inputs["profile"]
    found = nests.load_nests(ex / "candidates.json", pr / "timing.csv", pr / "counters.csv")
    info = json.loads((pr / "profile.json").read_text())
    return PolicyContext(nests=found, forward_s=info["forward_s"],
                         outputs=nests.outputs(ex / "candidates.json"),
                         b_cpu_gbps=b_cpu(inputs["calibrate"]), policy=p.policy,
                         target=p.target, copy_model=p.copy_model)


def run(inputs: Inputs, p: Params, out: Path) -> None:
    ctx = context(inputs, p)
    placement = policies.place(p.policy.name, ctx)
    policies.write(out / "decisions.json", p.policy.name, placement, ctx)
