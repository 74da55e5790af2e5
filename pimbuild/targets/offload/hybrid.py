"""What a placement costs on a target (docs/design.md §6): eq. 9, ground truth, the oracle.

``T_hybrid = T_host + T_device + T_copy + N_region * T_sw`` (paper eq. 9): ``T_host`` is the
host nests' time plus whatever the forward spends outside all nests, ``T_device`` the target's
time of the offloaded nests, ``T_copy`` the copy model's bytes at the target's copy cost and
``N_region`` the host<->device transitions, two per segment of consecutive offloaded nests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pimbuild.targets.offload.copymodels import CopyModel, segments
from pimbuild.targets.offload.nests import Nest

if TYPE_CHECKING:
    from pimbuild.targets.offload.protocol import OffloadTarget


@dataclass(frozen=True)
class Breakdown:
    t_cpu_only_s: float
    t_host_s: float
    t_device_s: float
    t_copy_s: float
    t_switch_s: float
    n_region: int
    fetch_bytes: int
    flush_bytes: int

    @property
    def t_hybrid_s(self) -> float:
        return self.t_host_s + self.t_device_s + self.t_copy_s + self.t_switch_s

    @property
    def speedup(self) -> float:
        return self.t_cpu_only_s / self.t_hybrid_s


def hybrid(nests: list[Nest], offloaded: set[int], forward_s: float, target: OffloadTarget,
           copy_model: CopyModel, outputs: set[str]) -> Breakdown:
    """Eq. 9 for the placement ``offloaded`` (nest ids); everything else stays on the host,
    including the time outside the nests. Nest medians need not add up to the forward's
    median, so CPU-only time is the nests' sum plus whatever the forward spends outside them."""
    outside = max(0.0, forward_s - sum(n.t_cpu_s for n in nests))
    t_cpu_only = sum(n.t_cpu_s for n in nests) + outside
    t_device = sum(target.unit_time(n) for n in nests if n.id in offloaded)
    t_host = outside + sum(n.t_cpu_s for n in nests if n.id not in offloaded)
    fetch, flush = copy_model.copies(nests, offloaded, outputs)
    # every run of a segment enters and leaves (a segment inside a loop: once per iteration)
    n_region = 2 * sum(max(seg[0].invocations, 1) for seg in segments(nests, offloaded))
    return Breakdown(t_cpu_only_s=t_cpu_only, t_host_s=t_host, t_device_s=t_device,
                     t_copy_s=target.copy_time(fetch, flush),
                     t_switch_s=target.switch_time(n_region), n_region=n_region,
                     fetch_bytes=fetch, flush_bytes=flush)


def beneficial(nest: Nest, nests: list[Nest], forward_s: float, target: OffloadTarget,
               copy_model: CopyModel, outputs: set[str]) -> bool:
    """Ground truth for one nest: does offloading it alone beat keeping it on the host?"""
    alone = hybrid(nests, {nest.id}, forward_s, target, copy_model, outputs)
    return alone.t_hybrid_s < alone.t_cpu_only_s


def best_placement(nests: list[Nest], forward_s: float, target: OffloadTarget,
                   copy_model: CopyModel, outputs: set[str], seeds: list[set[int]]
                   ) -> set[int]:
    """The oracle: the lowest T_hybrid found from the seeds (other policies' placements and
    every nest's ground truth) by flipping one nest at a time while that helps."""
    def cost(offloaded: set[int]) -> float:
        return hybrid(nests, offloaded, forward_s, target, copy_model, outputs).t_hybrid_s

    truth = {n.id for n in nests
             if beneficial(n, nests, forward_s, target, copy_model, outputs)}
    best = min([set(), truth, *seeds], key=cost)
    best_cost = cost(best)
    improved = True
    while improved:
        improved = False
        for n in nests:
            trial = best ^ {n.id}
            trial_cost = cost(trial)
            if trial_cost < best_cost - 1e-15:
                best, best_cost, improved = trial, trial_cost, True
    return best
