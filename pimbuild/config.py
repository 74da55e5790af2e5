"""Structured-config schemas for every config group, registered in Hydra's ConfigStore.

The schemas hold types only: every default lives in the YAML under ``conf/`` (one home for
each value). Each YAML file under ``conf/<group>/`` starts from the schema ``<group>_schema``,
so that a badly typed override (``pim.cores=abc``, ``lowering.fastmath=maybe``) fails while
Hydra composes the config. Options that name a pluggable part (``lowering.fusion``,
``profile.backend``, ``policy.name``, ``sim.copy_model``, ``system.name``) are strings checked
against their registry when the build is planned, before anything runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class ModelConfig:
    name: str = MISSING
    recipe: str = MISSING  # "package.module:function" returning a pimbuild.recipes.Recipe
    size: dict[str, int] = MISSING  # the builder's keyword arguments
    dtype: str = MISSING
    seed: int = MISSING


@dataclass
class LoweringConfig:
    fusion: str = MISSING  # a fusion mode (pimbuild.transforms.FUSIONS)
    fastmath: bool = MISSING
    weights: str = MISSING  # args | constants
    register_block: int = MISSING


@dataclass
class PlatformConfig:
    name: str = MISSING
    cache_line: int = MISSING
    l1d_bytes: int = MISSING
    l1d_assoc: int = MISSING
    l2_bytes: int = MISSING
    llc_bytes: int = MISSING
    llc_assoc: int = MISSING
    events: dict[str, str] = MISSING  # PAPI native events by role
    b_cpu_gbps: float | None = MISSING  # null: measured by the calibrate task
    calibration_mib: int = MISSING
    calibration_repetitions: int = MISSING
    calibration_warmup: int = MISSING
    b_mem_gbps: float = MISSING


@dataclass
class ProfileConfig:
    backend: str = MISSING  # a counter backend (pimbuild.counters.BACKENDS) or auto
    auto: list[str] = MISSING  # what `auto` tries, in order
    repetitions: int = MISSING
    warmup: int = MISSING


@dataclass
class SystemConfig:
    name: str = MISSING  # the target (pimbuild.targets.TARGETS)


@dataclass
class PimConfig:
    cores: int = MISSING  # N_core
    freq_ghz: float = MISSING  # f_pim
    t_sw_us: float = MISSING  # T_sw
    t_ctx_us: float = MISSING  # T_ctx of C1
    dram_latency_ns: float = MISSING
    bank_bw_gbps: float | None = MISSING
    launch_us: float = MISSING
    sync_ns_per_core: float = MISSING
    c_load: float = MISSING
    c_store: float = MISSING
    c_arith: float = MISSING
    c_math: float = MISSING
    c_loop: float = MISSING


@dataclass
class PolicyConfig:
    name: str = MISSING  # a policy (pimbuild.policies.POLICIES)
    theta_ratio: float = MISSING
    theta_gbps: float | None = MISSING
    sigma: float = MISSING
    i_min: float = MISSING


@dataclass
class SimConfig:
    copy_model: str = MISSING  # a copy model (pimbuild.copymodels.COPY_MODELS)
    cores_sweep: list[int] = MISSING


@dataclass
class Config:
    model: ModelConfig = MISSING
    lowering: LoweringConfig = MISSING
    platform: PlatformConfig = MISSING
    profile: ProfileConfig = MISSING
    system: SystemConfig = MISSING
    pim: PimConfig = MISSING
    policy: PolicyConfig = MISSING
    sim: SimConfig = MISSING
    targets: list[str] = MISSING  # the stages to build, with everything they read
    store: str = MISSING  # the artifact store, relative to the launch directory
    show_candidates: bool = MISSING  # print the candidates table at the end of a run
    verify: bool = MISSING  # hash every file of an artifact before reusing it


SCHEMAS: dict[str, Any] = {
    "model": ModelConfig,
    "lowering": LoweringConfig,
    "platform": PlatformConfig,
    "profile": ProfileConfig,
    "system": SystemConfig,
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


def plain(node: Any) -> Any:
    """A config node as plain Python values (dicts, lists, scalars)."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(node, resolve=True, enum_to_str=True)
