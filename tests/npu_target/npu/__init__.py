"""A host CPU + NPU target, added from outside pimbuild on the host-plus-accelerator core
(``pimbuild.targets.offload``): its stages, policies, copy models, eq. 9 and report are the
core's; this file is the NPU's timing model and the protocol around it. Unlike PIM, a unit's
data is copied by DMA, which costs a setup per transfer, and the NPU computes in vectors of
``lanes`` elements at a roofline with its tiles' local memory."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, ClassVar

from pimbuild.targets.offload import summary
from pimbuild.targets.offload.protocol import OFFLOAD_STAGES, Boundary, DeviceCosts, Sides


@dataclass(frozen=True)
class NpuTarget:
    tiles: int
    clock_ghz: float
    lanes: float
    local_gbps: float
    dma_setup_us: float
    dma_gbps: float
    switch_us: float
    launch_us: float

    host: ClassVar[str] = "host"
    device: ClassVar[str] = "npu"
    units_name: ClassVar[str] = "tiles"
    baselines: ClassVar[tuple[str, ...]] = ("cpu", "oracle")
    pipeline: ClassVar[dict[str, str]] = {
        "lower": "pimbuild.frontend.lower", "extract": "pimbuild.codegen.extract",
        "runtime": "pimbuild.codegen.runtime",
        **{s: f"pimbuild.targets.offload.{s}" for s in OFFLOAD_STAGES}}

    @classmethod
    def from_config(cls, cfg: Any) -> NpuTarget:
        p = cfg.system.params
        return cls(tiles=int(p.tiles), clock_ghz=float(p.clock_ghz), lanes=float(p.lanes),
                   local_gbps=float(p.local_gbps), dma_setup_us=float(p.dma_setup_us),
                   dma_gbps=float(p.dma_gbps), switch_us=float(p.switch_us),
                   launch_us=float(p.launch_us))

    @cached_property
    def costs(self) -> DeviceCosts:
        return DeviceCosts(cores=self.tiles, clock_ghz=self.clock_ghz, lanes=self.lanes,
                           t_ctx_s=self.switch_time(1), switch_s=self.switch_time(1),
                           launch_s=self.launch_us * 1e-6, sync_s_per_core=0.0,
                           sync_all=False)

    @property
    def boundary(self) -> Boundary:
        # the shared marker runtime's transition counters; the NPU's own kernel names
        return Boundary(begin="pim_offload_begin", end="pim_offload_end",
                        outline_prefix="npu_kernel_", device=self.device)

    @property
    def units(self) -> int:
        return self.tiles

    def with_units(self, units: int) -> NpuTarget:
        return dataclasses.replace(self, tiles=units)

    def unit_time(self, nest: Any) -> float:
        """A roofline per invocation: the op mix in vectors over the busy tiles against the
        bytes at the tiles' local bandwidth, plus the launch."""
        per_invocation = []
        for n_iter, n_total in nest.per_invocation or [(nest.n_iter, nest.n_total)] * max(
                nest.invocations, 1):
            tiles = self.costs.busy_cores(n_iter)
            ops = sum(nest.op_mix.values()) * n_total / max(n_iter, 1) * math.ceil(
                n_iter / tiles)
            compute = ops / (self.lanes * self.clock_ghz * 1e9)
            memory = nest.moved_bytes / (tiles * self.local_gbps * 1e9)
            per_invocation.append(self.costs.overhead_s(n_iter) + max(compute, memory))
        return sum(per_invocation)

    def copy_time(self, fetch_bytes: int, flush_bytes: int) -> float:
        transfers = (fetch_bytes > 0) + (flush_bytes > 0)
        return (transfers * self.dma_setup_us * 1e-6
                + (fetch_bytes + flush_bytes) / (self.dma_gbps * 1e9))

    def switch_time(self, n_region: int) -> float:
        return n_region * self.switch_us * 1e-6

    def describe(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def report_columns(self, nest: Any, policy: Any) -> dict[str, Any]:
        return {"t_npu_s": self.unit_time(nest)}

    @classmethod
    def summarize(cls, cfg: Any, dirs: dict[str, Path], width: int) -> list[Any]:
        return summary.summarize(cfg, dirs, width)

    def render(self, report: dict[str, Any], out_dir: Path) -> None:
        from pimbuild.targets.offload import report as drawn  # matplotlib

        drawn.render(report, Sides.of(self), out_dir)


TARGET = NpuTarget
