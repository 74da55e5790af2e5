"""The host-plus-accelerator core's config groups (``platform``: the host; ``profile``: how
it is measured; ``policy``: the offload rule; ``sim``: the copy model and the units swept):
their schemas, the ranges of their numbers and the lists that mean nothing empty.
``pimbuild.build.config`` composes them with the other groups; a target built on this core
(``pimbuild.targets.pim``) adds its own."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING


@dataclass
class PlatformConfig:
    name: str = MISSING
    cache_line: int = MISSING
    l1d_bytes: int = MISSING
    l1d_assoc: int = MISSING
    l2_bytes: int = MISSING
    l2_assoc: int = MISSING
    llc_bytes: int = MISSING
    llc_assoc: int = MISSING
    events: dict[str, str] = MISSING  # PAPI native events by role
    b_cpu_gbps: float | None = MISSING  # null: measured by the calibrate task
    calibration_mib: int = MISSING
    calibration_repetitions: int = MISSING
    calibration_warmup: int = MISSING
    calibration_rounds: int = MISSING
    calibration_max_spread: float = MISSING
    calibration_tag: str = MISSING
    b_mem_gbps: float = MISSING


@dataclass
class ProfileConfig:
    backend: str = MISSING  # a counter backend (pimbuild.targets.offload.counters.BACKENDS) or auto
    auto: list[str] = MISSING  # what `auto` tries, in order
    backend_options: dict[str, Any] = field(default_factory=dict)  # the backend's own
    repetitions: int = MISSING
    min_time_s: float = MISSING
    warmup: int = MISSING
    estimator: str = MISSING  # min | p25 | median
    valgrind_last_level: str = MISSING  # llc | l2: the cache whose read misses are n_rd
    valgrind_warm: bool = MISSING  # count a forward after a warm-up forward (steady state)
    reuse_memory: bool = MISSING  # time with freed memory reused, no page faults per forward
    eager_rounds: int = MISSING  # alternate forwards against PyTorch eager (0: none)


@dataclass
class PolicyConfig:
    name: str = MISSING  # a policy (pimbuild.targets.offload.policies.POLICIES)
    theta_ratio: float = MISSING
    theta_gbps: float | None = MISSING
    sigma: float = MISSING
    i_min: float = MISSING
    c1: str = MISSING  # paper: T_ctx + the compute bound; model: the target's fixed costs too
    c4: str = MISSING  # paper | read_later: C4 only when a later nest reads what it writes
    i_compute: float | None = MISSING  # C5: compute-bound nests; null: off (the paper's rule)
    # the policy's own options (its module's dataclass Options); none for the built-in ones
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class SimConfig:
    copy_model: str = MISSING  # a copy model (pimbuild.targets.offload.copymodels.COPY_MODELS)
    copy_model_options: dict[str, Any] = field(default_factory=dict)  # its own, if it has any
    cores_sweep: list[int] = MISSING


SCHEMAS: dict[str, Any] = {"platform": PlatformConfig, "profile": ProfileConfig,
                          "policy": PolicyConfig, "sim": SimConfig}

# The range of every number of these groups: (comparison, bound), or (comparison, bound,
# upper) where the value must also be <= upper (``pimbuild.build.config.validate``).
RANGES: dict[str, tuple[Any, ...]] = {
    "platform.cache_line": (">=", 1),
    "platform.l1d_bytes": (">=", 1),
    "platform.l1d_assoc": (">=", 1),
    "platform.l2_assoc": (">=", 1),
    "platform.l2_bytes": (">=", 1),
    "platform.llc_bytes": (">=", 1),
    "platform.llc_assoc": (">=", 1),
    "platform.b_cpu_gbps": (">", 0),
    "platform.calibration_mib": (">=", 1),
    "platform.calibration_repetitions": (">=", 1),
    "platform.calibration_warmup": (">=", 0),
    "platform.calibration_rounds": (">=", 1),
    "platform.calibration_max_spread": (">=", 0),
    "platform.b_mem_gbps": (">", 0),
    "profile.repetitions": (">=", 1),
    "profile.warmup": (">=", 0),
    "profile.min_time_s": (">=", 0),
    "policy.theta_ratio": (">=", 0),
    "policy.theta_gbps": (">=", 0),
    "policy.sigma": (">=", 0),
    "policy.i_min": (">=", 0),
    "policy.i_compute": (">=", 0),
    "sim.cores_sweep": (">=", 1),
}
# what ``profile.backend=auto`` tries (``sim.cores_sweep`` may be empty: the build's own
# ``pim.cores`` is always simulated)
NONEMPTY = ("profile.auto",)
