"""Stage ``decide``: host or PIM for every candidate nest, with the reason and the numbers.

Policies (``policy.name``):

- ``torchpim``: the paper's rule, ``offload = (C1 and C2) and (C3 or C4)``:
  C1 ``T_cpu >= T_ctx + N_total * I_min / (N_core * f_pim)``; C2 ``N_iter >= N_core``;
  C3 ``BW_read = n_rd * L / T_cpu > theta``; C4 ``StoreBound > sigma``.
  ``theta = policy.theta_ratio * B_cpu`` unless ``policy.theta_gbps`` is set.
- ``operator``: the same rule on each torch operator as a whole (its nests' times, counts and
  traffic summed, its parallelism the largest of its nests'); every nest of an operator gets
  the operator's decision.
- ``cpu``: nothing offloaded.
- ``oracle``: the placement with the lowest simulated hybrid time (``pimbuild.simulate``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pimbuild import pim_model
from pimbuild.nests import Nest

POLICIES = ("torchpim", "operator", "cpu", "oracle")


@dataclass(frozen=True)
class RuleParams:
    n_core: int
    f_pim_ghz: float
    t_ctx_s: float
    i_min: float
    theta_gbps: float
    sigma: float
    cache_line: int = 64


@dataclass
class Decision:
    id: int
    target: str  # "host" | "pim"
    decided_by: str  # the condition that decided it
    reason: str
    quantities: dict[str, Any] = field(default_factory=dict)


def c1_bound_s(n_total: int, invocations: int, p: RuleParams) -> float:
    """C1's lower bound on PIM time: N_total * I_min / (N_core * f_pim), per forward."""
    return n_total * max(invocations, 1) * p.i_min / (p.n_core * p.f_pim_ghz * 1e9)


def rule(t_cpu_s: float, n_total: int, invocations: int, n_iter: int,
         bw_read_gbps: float | None, store_bound: float | None, p: RuleParams
         ) -> tuple[bool, str, str, dict[str, Any]]:
    """The paper's two-stage rule; returns (offload, deciding condition, reason, numbers)."""
    bound = c1_bound_s(n_total, invocations, p)
    q = {"t_cpu_s": t_cpu_s, "c1_threshold_s": p.t_ctx_s + bound, "n_iter": n_iter,
         "n_core": p.n_core, "bw_read_gbps": bw_read_gbps, "theta_gbps": p.theta_gbps,
         "store_bound": store_bound, "sigma": p.sigma}
    if t_cpu_s < p.t_ctx_s + bound:
        return False, "C1", (f"T_cpu {t_cpu_s * 1e6:.3g} us < T_ctx + lower bound "
                             f"{(p.t_ctx_s + bound) * 1e6:.3g} us"), q
    if n_iter < p.n_core:
        return False, "C2", f"N_iter {n_iter} < N_core {p.n_core}", q
    if bw_read_gbps is None and store_bound is None:
        return False, "no-counters", "no counters to judge memory boundedness", q
    if bw_read_gbps is not None and bw_read_gbps > p.theta_gbps:
        return True, "C3", f"BW_read {bw_read_gbps:.3g} GB/s > theta {p.theta_gbps:.3g}", q
    if store_bound is not None and store_bound > p.sigma:
        return True, "C4", f"StoreBound {store_bound:.2f} > sigma {p.sigma}", q
    bw = "n/a" if bw_read_gbps is None else f"{bw_read_gbps:.3g} GB/s"
    sb = "n/a" if store_bound is None else f"{store_bound:.2f}"
    return False, "C3/C4", (f"BW_read {bw} <= theta {p.theta_gbps:.3g} and StoreBound "
                            f"{sb} <= sigma {p.sigma}"), q


def torchpim(nests: list[Nest], p: RuleParams) -> list[Decision]:
    decisions = []
    for n in nests:
        offload, by, why, q = rule(n.t_cpu_s, n.n_total, n.invocations, n.n_iter,
                                   n.bw_read_gbps, n.store_bound, p)
        decisions.append(Decision(n.id, "pim" if offload else "host", by, why, q))
    return decisions


def _operator_signals(group: list[Nest], p: RuleParams) -> tuple[float | None, float | None]:
    """Read bandwidth and store-bound of an operator as a whole (traffic over total time)."""
    t = sum(n.t_cpu_s for n in group)
    bw = None
    if all(n.bw_read_gbps is not None for n in group) and t > 0:
        bw = sum(n.bw_read_gbps * n.t_cpu_s for n in group) / t  # sum(n_rd * L) / sum(T)
    sb = None
    if all(n.store_bound is not None for n in group) and t > 0:
        sb = sum(n.store_bound * n.t_cpu_s for n in group) / t  # time-weighted
    return bw, sb


def operator_level(nests: list[Nest], p: RuleParams) -> list[Decision]:
    groups: dict[str, list[Nest]] = {}
    for n in nests:
        groups.setdefault(n.operator, []).append(n)
    verdict = {}
    for op, group in groups.items():
        bw, sb = _operator_signals(group, p)
        work = sum(n.n_total * max(n.invocations, 1) for n in group)
        verdict[op] = rule(sum(n.t_cpu_s for n in group), work, 1,
                           max(n.n_iter for n in group), bw, sb, p)
    decisions = []
    for n in nests:
        offload, by, why, q = verdict[n.operator]
        decisions.append(Decision(n.id, "pim" if offload else "host", f"operator:{by}",
                                  f"operator {n.operator}: {why}", q))
    return decisions


def cpu_only(nests: list[Nest]) -> list[Decision]:
    return [Decision(n.id, "host", "cpu", "policy cpu offloads nothing") for n in nests]


def write(path: Path, policy: str, params: RuleParams, decisions: list[Decision]) -> None:
    path.write_text(json.dumps({
        "policy": policy, "params": params.__dict__,
        "offloaded": [d.id for d in decisions if d.target == "pim"],
        "decisions": [d.__dict__ for d in decisions]}, indent=2) + "\n")


def oracle(nests: list[Nest], p: RuleParams, forward_s: float, m: pim_model.PimModel,
           copy_model: str, outputs: set[str]) -> list[Decision]:
    """The placement with the lowest simulated T_hybrid (seeded with the rule's placements)."""
    seeds = [{d.id for d in policy(nests, p) if d.target == "pim"}
             for policy in (torchpim, operator_level)]
    best = pim_model.best_placement(nests, forward_s, m, copy_model, outputs, seeds)
    decisions = []
    for n in nests:
        alone = pim_model.t_pim(n, m)
        q = {"t_cpu_s": n.t_cpu_s, "t_pim_s": alone}
        target = "pim" if n.id in best else "host"
        decisions.append(Decision(n.id, target, "oracle",
                                  f"lowest simulated T_hybrid places it on {target}", q))
    return decisions


def place(policy: str, nests: list[Nest], p: RuleParams, forward_s: float,
          m: pim_model.PimModel, copy_model: str, outputs: set[str]) -> list[Decision]:
    if policy == "torchpim":
        return torchpim(nests, p)
    if policy == "operator":
        return operator_level(nests, p)
    if policy == "cpu":
        return cpu_only(nests)
    if policy == "oracle":
        return oracle(nests, p, forward_s, m, copy_model, outputs)
    raise ValueError(f"unknown policy '{policy}'; policies are: {', '.join(POLICIES)}")
