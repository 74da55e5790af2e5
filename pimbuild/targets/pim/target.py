"""The PIM target: host CPU + general-purpose in-order PIM cores (Torch-PIM).

PIM time of a nest comes from the timing model ``pim.model`` (``pimbuild.targets.pim.timing``);
the default, ``pimprof`` (paper Table 2; PIMProf's PIM side): its parallel iterations are spread
over ``min(N_core, N_iter)`` cores; one parallel iteration costs its op mix in cycles (single
issue: one cycle per load, store, arithmetic op and loop step, ``c_math`` per transcendental
call done in software) at ``f_pim``; the bytes it touches move at ``B_bank`` per core (by
default ``B_bank = MLP * L / DRAM latency``: ``MLP`` lines in flight per core, 1 for an
in-order core that waits for each miss), and all cores together at most at the stack's
internal bandwidth ``B_stack`` (the vaults' or channels' aggregate; by default no ceiling);
a share ``overlap`` of the shorter of compute and memory time hides under the longer (0 by
default: none); one instruction handles ``lanes`` elements (1 by default; PIMProf's cores
run the host's x86 binary, vector instructions included); each invocation pays a launch
cost and a per-core synchronization / aggregation cost (over the busy cores, or every core
with ``sync_all``), which is what makes small regions slower as cores are added. The result is
never below C1's bound and grows with work. ``pim=fitted_paper`` fits ``MLP``, ``B_stack``,
``overlap``, ``lanes`` and the sync cost to the paper's published numbers
(``bench/fit_pim.py``). Host<->PIM copies move at the host memory
system's bandwidth ``B_mem``; each transition costs ``T_sw``. Parameters and their sources:
``pimbuild/conf/pim/default.yaml``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pimbuild.core.stage import plain
from pimbuild.targets.offload import summary
from pimbuild.targets.offload.protocol import OFFLOAD_STAGES, Boundary, DeviceCosts, Sides
from pimbuild.targets.pim.timing import TIMING_MODELS

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from pimbuild.targets.offload.nests import Nest
    from pimbuild.targets.offload.protocol import PolicyParams


@dataclass(frozen=True)
class PimTarget:
    n_core: int
    f_pim_ghz: float
    dram_latency_ns: float
    cache_line: int
    bank_bw_gbps: float | None  # per core; None: mlp * cache_line / dram_latency
    mlp: float  # memory-level parallelism: cache lines in flight per core
    stack_bw_gbps: float | None  # B_stack: all cores together; None: no shared ceiling
    overlap: float  # share of min(compute, memory) hidden under the other, in [0, 1]
    lanes: float  # elements one instruction handles (the vector width of the code run)
    sync_all: bool  # the per-core sync cost counts every core, not just the busy ones
    launch_us: float
    sync_ns_per_core: float
    c_load: float
    c_store: float
    c_arith: float
    c_math: float
    c_loop: float
    t_sw_us: float
    b_mem_gbps: float  # host memory system, for host<->PIM copies (B_rd = B_wb)
    t_ctx_us: float  # T_ctx of the rule's C1
    model: str = "pimprof"  # the timing model (pim.model, pimbuild.targets.pim.timing)
    model_options: Any = None  # its own Options (pim.model_options), if it declares them

    host: ClassVar[str] = "host"
    device: ClassVar[str] = "pim"
    units_name: ClassVar[str] = "cores"
    baselines: ClassVar[tuple[str, ...]] = ("cpu", "operator", "oracle")
    # The stages: the shared lower, extract (loop nests) and marker runtime, then the offload
    # core's (pimbuild/build/graph.py follows it).
    pipeline: ClassVar[dict[str, str]] = {
        "lower": "pimbuild.frontend.lower", "extract": "pimbuild.codegen.extract",
        "runtime": "pimbuild.codegen.runtime",
        **{s: f"pimbuild.targets.offload.{s}" for s in OFFLOAD_STAGES}}

    @classmethod
    def from_config(cls, cfg: DictConfig) -> PimTarget:
        pim = cfg.pim
        return cls(n_core=pim.cores, f_pim_ghz=pim.freq_ghz,
                   dram_latency_ns=pim.dram_latency_ns, cache_line=cfg.platform.cache_line,
                   bank_bw_gbps=pim.bank_bw_gbps, mlp=pim.mlp,
                   stack_bw_gbps=pim.stack_bw_gbps, overlap=pim.overlap,
                   lanes=pim.lanes, sync_all=pim.sync_all,
                   launch_us=pim.launch_us,
                   sync_ns_per_core=pim.sync_ns_per_core, c_load=pim.c_load,
                   c_store=pim.c_store, c_arith=pim.c_arith, c_math=pim.c_math,
                   c_loop=pim.c_loop, t_sw_us=pim.t_sw_us, b_mem_gbps=cfg.platform.b_mem_gbps,
                   t_ctx_us=pim.t_ctx_us, model=pim.model,
                   model_options=TIMING_MODELS.options(pim.model, plain(pim.model_options)))

    @property
    def boundary(self) -> Boundary:
        return Boundary(begin="pim_offload_begin", end="pim_offload_end",
                        outline_prefix="pim_nest_", device=self.device)

    @cached_property
    def costs(self) -> DeviceCosts:
        return DeviceCosts(cores=self.n_core, clock_ghz=self.f_pim_ghz, lanes=self.lanes,
                           t_ctx_s=self.t_ctx_us * 1e-6, switch_s=self.switch_time(1),
                           launch_s=self.launch_us * 1e-6,
                           sync_s_per_core=self.sync_ns_per_core * 1e-9,
                           sync_all=self.sync_all)

    @property
    def units(self) -> int:
        return self.n_core

    def with_units(self, units: int) -> PimTarget:
        return dataclasses.replace(self, n_core=units)

    @property
    def b_bank_gbps(self) -> float:
        """Per core."""
        return self.bank_bw_gbps or self.mlp * self.cache_line / self.dram_latency_ns

    def b_pim_gbps(self, cores: int) -> float:
        """``cores`` together: ``min(cores * B_bank, B_stack)``."""
        return min(cores * self.b_bank_gbps, self.stack_bw_gbps or math.inf)

    def unit_time(self, nest: Nest) -> float:
        """T_pim: seconds the nest takes on ``n_core`` PIM cores, per forward: every
        invocation alike, or (a nest whose bounds vary) the sum of each one's."""
        if nest.per_invocation:
            return sum(self.invocation_time(nest, n_iter, n_total)
                       for n_iter, n_total in nest.per_invocation)
        return max(nest.invocations, 1) * self.invocation_time(nest, nest.n_iter, nest.n_total)

    def invocation_time(self, nest: Nest, n_iter: float, n_total: float) -> float:
        """One invocation of ``nest`` with ``n_iter`` parallel and ``n_total`` iterations, by
        the timing model ``pim.model`` (``pimbuild.targets.pim.timing``)."""
        return self.timing(self, nest, n_iter, n_total)

    @cached_property
    def timing(self) -> Callable[..., float]:
        """The timing model's ``invocation_time`` (found once per target)."""
        return TIMING_MODELS.get(self.model)

    def copy_time(self, fetch_bytes: int, flush_bytes: int) -> float:
        return (fetch_bytes + flush_bytes) / (self.b_mem_gbps * 1e9)

    def switch_time(self, n_region: int) -> float:
        return n_region * self.t_sw_us * 1e-6

    def describe(self) -> dict[str, Any]:
        """The timing model's parameters, as the report lists them (T_ctx is C1's and is in
        each decision's numbers)."""
        model = dataclasses.asdict(self)
        del model["t_ctx_us"]
        return model

    def report_columns(self, nest: Nest, policy: PolicyParams) -> dict[str, Any]:
        """T_pim, and C1's lower bound as the rule computed it (``policy.c1``)."""
        bound = self.costs.compute_bound_s(nest.n_total * max(nest.invocations, 1),
                                           policy.i_min, vector=policy.c1 == "model")
        return {"t_pim_s": self.unit_time(nest), "c1_bound_s": bound}

    @classmethod
    def summarize(cls, cfg: DictConfig, dirs: dict[str, Path], width: int) -> list[Any]:
        """What a build prints after its stages (``summary.summarize``)."""
        return summary.summarize(cfg, dirs, width)

    def render(self, report: dict[str, Any], out_dir: Path) -> None:
        from pimbuild.targets.offload import report as drawn  # matplotlib

        drawn.render(report, Sides.of(self), out_dir)


TARGET = PimTarget
