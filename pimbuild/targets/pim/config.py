"""The PIM target's config group, ``pim``: its timing model's parameters (their values and
sources: ``pimbuild/conf/pim/default.yaml``), with their ranges. The groups it shares with any
host-plus-accelerator target (``platform``, ``profile``, ``policy``, ``sim``) are the offload
core's (``pimbuild.targets.offload.config``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING


@dataclass
class PimConfig:
    cores: int = MISSING  # N_core
    freq_ghz: float = MISSING  # f_pim
    t_sw_us: float = MISSING  # T_sw
    t_ctx_us: float = MISSING  # T_ctx of C1
    dram_latency_ns: float = MISSING
    bank_bw_gbps: float | None = MISSING
    mlp: float = 1.0  # lines in flight per core
    stack_bw_gbps: float | None = None  # B_stack; None: no shared ceiling
    overlap: float = 0.0  # share of min(compute, memory) hidden
    lanes: float = 1.0  # elements per instruction
    sync_all: bool = False  # sync cost over every core (not only the busy ones)
    launch_us: float = MISSING
    sync_ns_per_core: float = MISSING
    c_load: float = MISSING
    c_store: float = MISSING
    c_arith: float = MISSING
    c_math: float = MISSING
    c_loop: float = MISSING
    model: str = "pimprof"  # the timing model (pimbuild.targets.pim.timing.TIMING_MODELS)
    model_options: dict[str, Any] = field(default_factory=dict)  # its own, if it has any


SCHEMAS: dict[str, Any] = {"pim": PimConfig}

# The range of every number: (comparison, bound), or (comparison, bound, upper) where the
# value must also be <= upper (``pimbuild.build.config.validate``).
RANGES: dict[str, tuple[Any, ...]] = {
    "pim.cores": (">=", 1),
    "pim.freq_ghz": (">", 0),
    "pim.t_sw_us": (">=", 0),
    "pim.t_ctx_us": (">=", 0),
    "pim.dram_latency_ns": (">", 0),
    "pim.bank_bw_gbps": (">", 0),
    "pim.mlp": (">", 0),
    "pim.stack_bw_gbps": (">", 0),
    "pim.overlap": (">=", 0, 1),
    "pim.lanes": (">=", 1),
    "pim.launch_us": (">=", 0),
    "pim.sync_ns_per_core": (">=", 0),
    "pim.c_load": (">=", 0),
    "pim.c_store": (">=", 0),
    "pim.c_arith": (">=", 0),
    "pim.c_math": (">=", 0),
    "pim.c_loop": (">=", 0),
}
