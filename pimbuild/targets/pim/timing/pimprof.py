"""PIM timing model ``pimprof`` (paper Table 2; PIMProf's PIM side): a nest's parallel
iterations are spread over ``min(N_core, N_iter)`` cores; one parallel iteration costs its op
mix in cycles (single issue: one cycle per load, store, arithmetic op and loop step,
``c_math`` per transcendental call done in software) at ``f_pim``, one instruction handling
``lanes`` elements; the bytes it touches move at ``B_bank`` per core and all cores together at
most at ``B_stack``; a share ``overlap`` of the shorter of compute and memory time hides under
the longer; each invocation pays the launch and the synchronisation of the busy cores (every
core with ``sync_all``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pimbuild.targets.offload.nests import Nest


def invocation_time(t: Any, nest: Nest, n_iter: float, n_total: float) -> float:
    """One invocation of ``nest`` with ``n_iter`` parallel and ``n_total`` iterations on the
    ``PimTarget`` ``t`` (its parameters; typed loosely, as the target imports this package's
    registry)."""
    costs = t.costs
    cores = costs.busy_cores(n_iter)
    per_core_iters = math.ceil(n_iter / cores)
    inner = n_total / max(n_iter, 1)  # innermost iterations per parallel one
    mix = nest.op_mix
    cycles = ((mix["loads"] * t.c_load + mix["stores"] * t.c_store
               + mix["arith"] * t.c_arith + inner * t.c_loop) / t.lanes
              + mix["math"] * t.c_math)
    compute = per_core_iters * cycles / (t.f_pim_ghz * 1e9)
    memory = nest.moved_bytes / (t.b_pim_gbps(cores) * 1e9)
    busy = compute + memory - t.overlap * min(compute, memory)
    return costs.overhead_s(n_iter) + busy
