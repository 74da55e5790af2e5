"""Policy ``torchpim``: the paper's two-stage rule, per nest.

``offload = (C1 and C2) and (C3 or C4)``, or with ``policy.i_compute`` set, ``... or (C2 and
C5)``:
C1 ``T_cpu >= T_ctx + N_total * I_min / (N_core * f_pim)`` (``policy.c1=paper``; with
``policy.c1=model`` the target's fixed costs replace T_ctx: ``c1_threshold_s``); C2
``N_iter >= N_core``;
C3 ``BW_read = n_rd * L / T_cpu > theta``; C4 ``StoreBound > sigma``; C5 (not in the paper)
C1's threshold with ``I_compute`` (at least ``I_min``) in place of ``I_min``: compute-bound work
the PIM cores outrun whatever the memory does;
``theta = policy.theta_ratio * B_cpu`` unless ``policy.theta_gbps`` is set. It reads only
what the offload protocol offers: the target's ``costs`` (``DeviceCosts``: N_core, f, lanes,
T_ctx and the fixed costs), so any target that implements the protocol can use it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from pimbuild.core.errors import ConfigError
from pimbuild.targets.offload.policies import Decision, Placement, PolicyContext

if TYPE_CHECKING:
    from pimbuild.targets.offload.nests import Nest
    from pimbuild.targets.offload.protocol import DeviceCosts

C1_MODES = ("paper", "model")
# C4: paper: StoreBound > sigma. read_later: and some buffer the nest writes is read by a later
# nest of the forward (stores that only leave the program come back to the host anyway).
C4_MODES = ("paper", "read_later")


@dataclass(frozen=True)
class RuleParams:
    """The rule's numbers: the device as the target's protocol describes it (``costs``) and
    the policy's thresholds."""

    costs: DeviceCosts
    i_min: float
    theta_gbps: float
    sigma: float
    c1: str = "model"  # paper | model
    c4: str = "paper"  # paper | read_later
    i_compute: float | None = None  # C5's instructions per element; None: no C5

    @property
    def n_core(self) -> int:
        return self.costs.cores

    def record(self) -> dict[str, Any]:
        """The numbers as ``decisions.json`` lists them (one flat table)."""
        return {**asdict(self.costs), "i_min": self.i_min, "theta_gbps": self.theta_gbps,
                "sigma": self.sigma, "c1": self.c1, "c4": self.c4, "i_compute": self.i_compute}


def rule_params(ctx: PolicyContext) -> RuleParams:
    c1 = ctx.policy.c1
    if c1 not in C1_MODES:
        raise ConfigError(f"policy.c1={c1}: choose one of {', '.join(C1_MODES)}")
    return RuleParams(costs=ctx.target.costs, i_min=ctx.policy.i_min,
                      theta_gbps=ctx.policy.theta(ctx.b_cpu_gbps), sigma=ctx.policy.sigma,
                      c1=c1, c4=ctx.policy.c4, i_compute=ctx.policy.i_compute)


def c1_bound_s(n_total: int, invocations: int, p: RuleParams) -> float:
    """C1's lower bound on device time: N_total * I_min / (N_core * f), per forward; under
    ``c1=model`` one instruction handles the target's ``lanes`` elements, as the target
    charges it."""
    return p.costs.compute_bound_s(n_total * max(invocations, 1), p.i_min,
                                   vector=p.c1 == "model")


def c1_threshold_s(n_total: int, invocations: int, n_iter: int, p: RuleParams) -> float:
    """What T_cpu must reach to pass C1. ``paper``: T_ctx + the compute bound. ``model``: the
    compute bound plus the fixed costs of the nest offloaded alone: its region's two switches
    and, per invocation, the launch and the synchronisation (``DeviceCosts.overhead_s``, the
    terms the target's timing model charges)."""
    bound = c1_bound_s(n_total, invocations, p)
    if p.c1 == "paper":
        return p.costs.t_ctx_s + bound
    return (2 * p.costs.switch_s + max(invocations, 1) * p.costs.overhead_s(n_iter)
            + bound)


def borderline(offload: bool, t_cpu_s: float, n_total: int, invocations: int, n_iter: int,
               bw_read_gbps: float | None, store_bound: float | None, p: RuleParams,
               spread: float, read_later: bool = True) -> bool:
    """Whether T_cpu moved by its own spread either way (and BW_read = n_rd * L / T_cpu with
    it) would flip the decision: another run on this host may then decide otherwise."""
    for f in (1 + spread, 1 / (1 + spread)):
        bw = None if bw_read_gbps is None else bw_read_gbps / f
        if rule(t_cpu_s * f, n_total, invocations, n_iter, bw, store_bound, p,
                read_later)[0] != offload:
            return True
    return False


def c5_threshold_s(n_total: int, invocations: int, n_iter: int, p: RuleParams
                   ) -> float | None:
    """What T_cpu must reach to pass C5 (None: no C5): C1's threshold with ``I_compute``
    instructions per element (at least ``I_min``)."""
    if p.i_compute is None:
        return None
    from dataclasses import replace

    return c1_threshold_s(n_total, invocations, n_iter,
                          replace(p, i_min=max(p.i_compute, p.i_min)))


def rule(t_cpu_s: float, n_total: int, invocations: int, n_iter: int,
         bw_read_gbps: float | None, store_bound: float | None, p: RuleParams,
         read_later: bool = True) -> tuple[bool, str, str, dict[str, Any]]:
    """The paper's two-stage rule, then C5 where it is on; returns (offload, deciding
    condition, reason, numbers). ``read_later``: a later nest reads something this one writes
    (``c4=read_later``)."""
    offload, by, why, q = memory_rule(t_cpu_s, n_total, invocations, n_iter, bw_read_gbps,
                                      store_bound, p, read_later)
    c5 = c5_threshold_s(n_total, invocations, n_iter, p)
    if offload or by in ("C1", "C2") or c5 is None:
        return offload, by, why, q
    q["c5_threshold_s"] = c5
    if t_cpu_s >= c5:
        return True, "C5", (f"T_cpu {t_cpu_s * 1e6:.3g} us >= {c5 * 1e6:.3g} us (fixed costs "
                            f"+ I_compute {max(p.i_compute, p.i_min):g}/element)"), q
    return False, by, f"{why}; T_cpu < C5's {c5 * 1e6:.3g} us", q


def memory_rule(t_cpu_s: float, n_total: int, invocations: int, n_iter: int,
                bw_read_gbps: float | None, store_bound: float | None, p: RuleParams,
                read_later: bool = True) -> tuple[bool, str, str, dict[str, Any]]:
    """The paper's two-stage rule: C1, C2, then C3 or C4."""
    threshold = c1_threshold_s(n_total, invocations, n_iter, p)
    q = {"t_cpu_s": t_cpu_s, "c1_threshold_s": threshold, "n_iter": n_iter,
         "n_core": p.n_core, "bw_read_gbps": bw_read_gbps, "theta_gbps": p.theta_gbps,
         "store_bound": store_bound, "sigma": p.sigma}
    if t_cpu_s < threshold:
        what = "T_ctx + lower bound" if p.c1 == "paper" else "fixed costs + lower bound"
        return False, "C1", (f"T_cpu {t_cpu_s * 1e6:.3g} us < {what} "
                             f"{threshold * 1e6:.3g} us"), q
    if n_iter < p.n_core:
        return False, "C2", f"N_iter {n_iter} < N_core {p.n_core}", q
    if bw_read_gbps is None and store_bound is None:
        return False, "no-counters", "no counters to judge memory boundedness", q
    if bw_read_gbps is not None and bw_read_gbps > p.theta_gbps:
        return True, "C3", f"BW_read {bw_read_gbps:.3g} GB/s > theta {p.theta_gbps:.3g}", q
    if store_bound is not None and store_bound > p.sigma:
        if p.c4 == "paper" or read_later:
            return True, "C4", f"StoreBound {store_bound:.2f} > sigma {p.sigma}", q
        return False, "C4", (f"StoreBound {store_bound:.2f} > sigma {p.sigma}, but no later "
                             f"nest reads what it writes (c4=read_later)"), q
    bw = "n/a" if bw_read_gbps is None else f"{bw_read_gbps:.3g} GB/s"
    sb = "n/a" if store_bound is None else f"{store_bound:.2f}"
    return False, "C3/C4", (f"BW_read {bw} <= theta {p.theta_gbps:.3g} and StoreBound "
                            f"{sb} <= sigma {p.sigma}"), q


def read_later(nests: list[Nest]) -> set[int]:
    """Ids of the nests that write a buffer some later nest of the forward reads (the MLIR's
    per-nest buffers, in program order; a later nest that overwrites the buffer first is not
    told apart)."""
    read_after: set[str] = set()
    out = set()
    for n in reversed(nests):
        if read_after & set(n.writes):
            out.add(n.id)
        read_after |= set(n.reads)
    return out


def place(ctx: PolicyContext) -> Placement:
    p = rule_params(ctx)
    side = {True: ctx.target.device, False: ctx.target.host}
    feeding = read_later(ctx.nests)
    decisions = []
    for n in ctx.nests:
        fed = n.id in feeding
        offload, by, why, q = rule(n.t_cpu_s, n.n_total, n.invocations, n.n_iter,
                                   n.bw_read_gbps, n.store_bound, p, fed)
        q["t_spread"] = n.t_spread
        shaky = borderline(offload, n.t_cpu_s, n.n_total, n.invocations, n.n_iter,
                           n.bw_read_gbps, n.store_bound, p, n.t_spread, fed)
        decisions.append(Decision(n.id, side[offload], by, why, q, shaky))
    return Placement(p.record(), decisions)
