"""The analytic cost model the simulator and the oracle share (DESIGN §5, §6).

PIM time of a nest (general-purpose in-order PIM cores, paper Table 2; PIMProf's PIM side):
its parallel iterations are spread over ``min(N_core, N_iter)`` cores; one parallel
iteration costs its op mix in cycles (single issue: one cycle per load, store, arithmetic op
and loop step, ``c_math`` per transcendental call done in software) at ``f_pim``; the bytes
it touches move at ``B_bank`` per core (an in-order core waits for each line: by default
``B_bank = L / DRAM latency``); compute and memory do not overlap; each invocation pays a
launch cost and a per-core synchronization / aggregation cost, which is what makes small
regions slower as cores are added. The result is never below C1's bound and grows with work.

Host-PIM data movement of a placement, per execution of each segment (consecutive PIM nests):
- ``upper_bound`` (paper eq. 8): fetch every buffer a segment reads before writing it, flush
  every buffer it writes; buffers are identified by allocation.
- ``resident``: a buffer moves only when the side about to use it does not hold its latest
  version; outputs left on PIM are flushed at the end.

``T_hybrid = T_host + T_pim + T_copy + N_region * T_sw`` (eq. 9), ``N_region`` the host<->PIM
transitions: two per segment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pimbuild.nests import Nest


@dataclass(frozen=True)
class PimModel:
    """The model's parameters; their defaults and sources live in ``conf/pim/default.yaml``
    (``tasks.stages.model_params`` builds one from a composed config)."""

    n_core: int
    f_pim_ghz: float
    dram_latency_ns: float
    cache_line: int
    bank_bw_gbps: float | None  # per core; None: cache_line / dram_latency
    launch_us: float
    sync_ns_per_core: float
    c_load: float
    c_store: float
    c_arith: float
    c_math: float
    c_loop: float
    t_sw_us: float
    b_mem_gbps: float  # host memory system, for host<->PIM copies (B_rd = B_wb)

    @property
    def b_bank_gbps(self) -> float:
        return self.bank_bw_gbps or self.cache_line / self.dram_latency_ns


def moved_bytes(nest: Nest) -> int:
    return sum({**nest.reads, **nest.writes}.values())


def t_pim(nest: Nest, m: PimModel) -> float:
    """Seconds the nest takes on ``m.n_core`` PIM cores, per forward."""
    cores = max(1, min(m.n_core, nest.n_iter))
    per_core_iters = math.ceil(nest.n_iter / cores)
    inner = nest.n_total / max(nest.n_iter, 1)  # innermost iterations per parallel one
    mix = nest.op_mix
    cycles = (mix["loads"] * m.c_load + mix["stores"] * m.c_store + mix["arith"] * m.c_arith
              + mix["math"] * m.c_math + inner * m.c_loop)
    compute = per_core_iters * cycles / (m.f_pim_ghz * 1e9)
    memory = moved_bytes(nest) / cores / (m.b_bank_gbps * 1e9)
    overhead = m.launch_us * 1e-6 + cores * m.sync_ns_per_core * 1e-9
    return max(nest.invocations, 1) * (overhead + compute + memory)


def segments(nests: list[Nest], pim: set[int]) -> list[list[Nest]]:
    """Maximal runs of consecutive PIM nests, in program order."""
    runs: list[list[Nest]] = []
    current: list[Nest] = []
    for n in nests:
        if n.id in pim:
            current.append(n)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def copy_upper_bound(nests: list[Nest], pim: set[int]) -> tuple[int, int]:
    """(fetch, flush) bytes per forward under eq. 8."""
    fetch = flush = 0
    for seg in segments(nests, pim):
        written: set[str] = set()
        fetched: dict[str, int] = {}
        flushed: dict[str, int] = {}
        for n in seg:
            for alloc, size in n.reads.items():
                if alloc not in written:
                    fetched[alloc] = size
            for alloc, size in n.writes.items():
                written.add(alloc)
                flushed[alloc] = size
        executions = max(seg[0].invocations, 1)
        fetch += executions * sum(fetched.values())
        flush += executions * sum(flushed.values())
    return fetch, flush


def copy_resident(nests: list[Nest], pim: set[int], outputs: set[str]) -> tuple[int, int]:
    """(fetch, flush) bytes per forward when buffers stay where they were last written."""
    latest: dict[str, str] = {}  # allocation -> "host" | "pim" | "both"; default host
    fetch = flush = 0
    size: dict[str, int] = {}
    for n in nests:
        side = "pim" if n.id in pim else "host"
        times = max(n.invocations, 1)
        for alloc, nbytes in n.reads.items():
            size[alloc] = nbytes
            held = latest.get(alloc, "host")
            if side == "pim" and held == "host":
                fetch += times * nbytes
                latest[alloc] = "both"
            elif side == "host" and held == "pim":
                flush += times * nbytes
                latest[alloc] = "both"
        for alloc, nbytes in n.writes.items():
            size[alloc] = nbytes
            latest[alloc] = side
    flush += sum(size[a] for a, held in latest.items() if held == "pim" and a in outputs)
    return fetch, flush


@dataclass(frozen=True)
class Breakdown:
    t_cpu_only_s: float
    t_host_s: float
    t_pim_s: float
    t_copy_s: float
    t_switch_s: float
    n_region: int
    fetch_bytes: int
    flush_bytes: int

    @property
    def t_hybrid_s(self) -> float:
        return self.t_host_s + self.t_pim_s + self.t_copy_s + self.t_switch_s

    @property
    def speedup(self) -> float:
        return self.t_cpu_only_s / self.t_hybrid_s


def hybrid(nests: list[Nest], pim: set[int], forward_s: float, m: PimModel,
           copy_model: str, outputs: set[str]) -> Breakdown:
    """Eq. 9 for the placement ``pim`` (nest ids on PIM); everything else stays on the host,
    including the time outside the nests. Nest medians need not add up to the forward's
    median, so CPU-only time is the nests' sum plus whatever the forward spends outside them."""
    outside = max(0.0, forward_s - sum(n.t_cpu_s for n in nests))
    t_cpu_only = sum(n.t_cpu_s for n in nests) + outside
    t_pim_total = sum(t_pim(n, m) for n in nests if n.id in pim)
    t_host = outside + sum(n.t_cpu_s for n in nests if n.id not in pim)
    if copy_model == "resident":
        fetch, flush = copy_resident(nests, pim, outputs)
    else:
        fetch, flush = copy_upper_bound(nests, pim)
    n_region = 2 * len(segments(nests, pim))
    return Breakdown(t_cpu_only_s=t_cpu_only, t_host_s=t_host, t_pim_s=t_pim_total,
                     t_copy_s=(fetch + flush) / (m.b_mem_gbps * 1e9),
                     t_switch_s=n_region * m.t_sw_us * 1e-6, n_region=n_region,
                     fetch_bytes=fetch, flush_bytes=flush)


def beneficial(nest: Nest, nests: list[Nest], forward_s: float, m: PimModel,
               copy_model: str, outputs: set[str]) -> bool:
    """Ground truth for one nest: does offloading it alone beat keeping it on the host?"""
    alone = hybrid(nests, {nest.id}, forward_s, m, copy_model, outputs)
    return alone.t_hybrid_s < alone.t_cpu_only_s


def best_placement(nests: list[Nest], forward_s: float, m: PimModel, copy_model: str,
                   outputs: set[str], seeds: list[set[int]]) -> set[int]:
    """The oracle: the lowest T_hybrid found from the seeds (other policies' placements and
    every nest's ground truth) by flipping one nest at a time while that helps."""
    def cost(pim: set[int]) -> float:
        return hybrid(nests, pim, forward_s, m, copy_model, outputs).t_hybrid_s

    truth = {n.id for n in nests if beneficial(n, nests, forward_s, m, copy_model, outputs)}
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
