"""Structured-config schemas for every config group, registered in Hydra's ConfigStore.

Each YAML file under ``conf/<group>/`` starts from the schema ``<group>_schema`` so that a bad
override (``pim.cores=abc``, ``lowering.fusion=some``) fails while Hydra composes the config.
Stages receive a frozen slice of this tree; the fields a stage reads are part of its artifact key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


class Fusion(Enum):
    none = "none"  # every linalg op lowers to its own loop nest
    controlled = "controlled"  # elementwise into elementwise only, never into a reduction
    full = "full"  # MLIR's elementwise fusion as is


class Weights(Enum):
    args = "args"  # parameters become function arguments (small IR, fast import)
    constants = "constants"  # parameters become dense constants in the IR


class CounterBackend(Enum):
    auto = "auto"
    papi = "papi"
    valgrind = "valgrind"
    timer = "timer"


class PolicyName(Enum):
    torchpim = "torchpim"  # the paper's rule, per nest
    operator = "operator"  # the same rule per torch operator
    cpu = "cpu"  # nothing offloaded
    oracle = "oracle"  # lowest simulated hybrid time


class CopyModel(Enum):
    upper_bound = "upper_bound"  # paper eq. 8: whole read/write set per execution
    resident = "resident"  # buffers that stay on PIM are not moved again


@dataclass
class ModelConfig:
    name: str = MISSING
    recipe: str = MISSING  # "module.path:function" returning a recipes.Recipe
    size: dict[str, int] = field(default_factory=dict)  # recipe size parameters
    dtype: str = "float32"
    seed: int = 0


@dataclass
class LoweringConfig:
    fusion: Fusion = Fusion.controlled
    fastmath: bool = True  # #arith.fastmath<reassoc,contract> on float arithmetic
    weights: Weights = Weights.args
    register_block: int = 16  # codegen: rows per reduction loop (1 = off)


@dataclass
class PlatformConfig:
    name: str = MISSING
    cache_line: int = 64
    l1d_bytes: int = 48 * 1024
    l1d_assoc: int = 12
    l2_bytes: int = 1280 * 1024
    llc_bytes: int = 42 * 1024 * 1024
    llc_assoc: int = 21  # valgrind needs a power-of-two number of sets
    # PAPI native events by role (paper Table 1); read by the profile stage.
    events: dict[str, str] = field(default_factory=dict)
    b_cpu_gbps: float | None = None  # null: measured by the calibrate task
    calibration_mib: int = 512  # calibrate's streaming buffer, larger than the LLC
    b_mem_gbps: float = 204.8  # host memory-system bandwidth used for host<->PIM copies


@dataclass
class ProfileConfig:
    backend: CounterBackend = CounterBackend.auto
    repetitions: int = 10
    warmup: int = 2


@dataclass
class PimConfig:
    """PIM cores and the timing model's parameters (sources in conf/pim/default.yaml)."""

    cores: int = 128  # N_core
    freq_ghz: float = 1.0  # f_pim
    t_sw_us: float = 2.0  # T_sw, host<->PIM switch cost
    t_ctx_us: float = 2.0  # T_ctx of C1
    dram_latency_ns: float = 22.5
    bank_bw_gbps: float | None = None  # per core; null: cache line / DRAM latency
    launch_us: float = 1.0
    sync_ns_per_core: float = 20.0
    c_load: float = 1.0
    c_store: float = 1.0
    c_arith: float = 1.0
    c_math: float = 40.0
    c_loop: float = 1.0


@dataclass
class PolicyConfig:
    name: PolicyName = PolicyName.torchpim
    theta_ratio: float = 0.12  # theta = theta_ratio * B_cpu
    theta_gbps: float | None = None  # absolute theta, overrides theta_ratio when set
    sigma: float = 0.4
    i_min: float = 1.0


@dataclass
class SimConfig:
    copy_model: CopyModel = CopyModel.upper_bound
    cores_sweep: list[int] = field(default_factory=lambda: [32, 64, 128])


@dataclass
class Config:
    model: ModelConfig = MISSING
    lowering: LoweringConfig = MISSING
    platform: PlatformConfig = MISSING
    profile: ProfileConfig = MISSING
    pim: PimConfig = MISSING
    policy: PolicyConfig = MISSING
    sim: SimConfig = MISSING
    # The stages to build, with everything they depend on. Default: every stage that exists.
    targets: list[str] = field(default_factory=lambda: ["simulate"])
    store: str = "outputs/artifacts"  # the artifact store, relative to the launch directory
    show_candidates: bool = True  # print the candidates table at the end of a run


SCHEMAS = {
    "model": ModelConfig,
    "lowering": LoweringConfig,
    "platform": PlatformConfig,
    "profile": ProfileConfig,
    "pim": PimConfig,
    "policy": PolicyConfig,
    "sim": SimConfig,
}


def register_configs() -> None:
    """Register the schemas: ``base_config`` and ``<group>/<group>_schema``."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for group, schema in SCHEMAS.items():
        cs.store(group=group, name=f"{group}_schema", node=schema)
