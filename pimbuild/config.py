"""Structured-config schemas for every config group, registered in Hydra's ConfigStore.

The schemas hold types, and the few defaults a user's own file may leave out (a model's
``size``, ``dtype`` and ``seed``); every other default lives in the YAML under ``conf/`` (one
home for each value). Each YAML file under ``conf/<group>/`` starts from the schema
``<group>_schema``, so that a badly typed override (``pim.cores=abc``,
``lowering.fastmath=maybe``) fails while Hydra composes the config. Options that name a
pluggable part (``lowering.fusion``, ``profile.backend``, ``policy.name``, ``sim.copy_model``,
``system.name``) are strings checked against their registry when the build is planned, before
anything runs; a value no file sets is one error line naming its key (``validate``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from pimbuild.errors import ConfigError


@dataclass
class ModelConfig:
    name: str = MISSING
    recipe: str = MISSING  # "package.module:function" returning a pimbuild.recipes.Recipe
    # The defaults a user's model file may leave out live here, once (the shipped model files
    # do not repeat them): no keyword arguments, float32, seed 0.
    size: dict[str, int] = field(default_factory=dict)  # the builder's keyword arguments
    dtype: str = "float32"
    seed: int = 0
    # Other phases of the same model (a prefill beside a decode step), by phase name: each a
    # recipe and its size, dtype and seed defaulting to this model's. A stage that reads a
    # phase (its PHASE_READS) gets that phase's stages built too (pimbuild/tasks/graph.py). None
    # unless the model file names some.
    phases: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoweringConfig:
    fusion: str = MISSING  # a fusion mode (pimbuild.transforms.FUSIONS)
    fastmath: bool = MISSING
    weights: str = MISSING  # args | constants
    register_block: int | None = MISSING  # None: chosen per host by calibrate's search
    register_block_candidates: list[int] = MISSING  # what the search times


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
    backend: str = MISSING  # a counter backend (pimbuild.targets.pim.counters.BACKENDS) or auto
    auto: list[str] = MISSING  # what `auto` tries, in order
    repetitions: int = MISSING
    min_time_s: float = MISSING
    warmup: int = MISSING
    estimator: str = MISSING  # min | p25 | median
    valgrind_last_level: str = MISSING  # llc | l2: the cache whose read misses are n_rd
    valgrind_warm: bool = MISSING  # count a forward after a warm-up forward (steady state)
    reuse_memory: bool = MISSING  # time with freed memory reused, no page faults per forward
    eager_rounds: int = MISSING  # alternate forwards against PyTorch eager (0: none)


@dataclass
class SystemConfig:
    name: str = MISSING  # the target (pimbuild.targets.TARGETS)
    # A target's own parameters, for a target without a config group of its own (a user's
    # target: its conf/system/<name>.yaml holds them); the shipped targets have groups.
    params: dict[str, Any] = field(default_factory=dict)


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


@dataclass
class DeviceConfig:
    """One GPU of the heterogeneous-GPU target (``conf/device/*.yaml``, spec-sheet numbers)."""

    name: str = MISSING
    fp32_tflops: float = MISSING  # CUDA cores
    bf16_tflops: float = MISSING  # tensor cores, dense
    mem_gbps: float = MISSING  # DRAM (HBM / GDDR) bandwidth
    l2_mb: float = MISSING
    memory_gb: float = MISSING
    launch_us: float = MISSING  # per-kernel launch overhead
    price_per_hour: float = MISSING  # USD per GPU-hour: Perf/$
    # What the fitted kernel-time model reads beside the above
    # (pimbuild/targets/gpus/kernelmodel.py)
    sms: int = MISSING  # streaming multiprocessors
    boost_mhz: float = MISSING  # boost clock
    tdp_w: float = MISSING  # board power limit


@dataclass
class LinkConfig:
    name: str = MISSING
    gbps: float = MISSING  # bandwidth in each direction
    latency_us: float = MISSING  # per transfer


@dataclass
class GpusConfig:
    precision: str = MISSING  # bf16 | fp16 | fp32: the served model's element type
    tensor_efficiency: float = MISSING
    cuda_efficiency: float = MISSING
    memory_efficiency: float = MISSING
    comm_on_device: float = MISSING
    time_limit_s: float = MISSING  # a planner's MILP stops after this long
    mip_gap: float = MISSING  # 0: proven optimal placements; else a relative gap to accept
    on_time_limit: str = MISSING  # error | best: fail, or keep the best placement and its gap
    period: int = MISSING  # layers planned jointly; the placement repeats every period layers
    kernel_model: str | None = MISSING  # profile.backend=fitted: a fit's JSON (null: shipped)
    tables: list[str] = MISSING  # profile.backend=table: kernel-time tables (JSON files)
    robust_samples: int = MISSING  # simulate: draws of the kernel-time model's error (0: off)


@dataclass
class ServeConfig:
    """Serving a model with a prefill phase (``model.phases.prefill``) on the GPU target:
    requests of the prefill recipe's prompt and ``output_len`` decode steps (docs/design.md
    §10)."""

    output_len: int = MISSING  # output tokens per request (the first comes from the prefill)
    requests: int = MISSING  # requests the discrete-event simulation serves
    arrivals: str = MISSING  # poisson | offline | trace
    rate: float = MISSING  # requests per second (arrivals=poisson)
    trace: str | None = MISSING  # CSV: arrival_s, input_tokens, output_tokens (arrivals=trace)
    seed: int = MISSING
    depth: int = MISSING  # forwards in flight at once (FluidGPU's stream pool)
    slo_s_per_token: float = MISSING  # the normalized-latency SLO for the max-rate search
    window_s: float = MISSING  # the online monitor's window W
    beta: float = MISSING  # its threshold: latency / execution-only latency above it
    stall_s: float = MISSING  # every device stalls this long at a placement switch
    monitor: bool = MISSING  # switch between the latency and throughput placements
    splits: int = MISSING  # the best splits of each kind (PD, AF) by closed form to simulate


@dataclass
class PolicyConfig:
    name: str = MISSING  # a policy (pimbuild.targets.pim.policies.POLICIES)
    theta_ratio: float = MISSING
    theta_gbps: float | None = MISSING
    sigma: float = MISSING
    i_min: float = MISSING
    c1: str = MISSING  # paper: T_ctx + the compute bound; model: the target's fixed costs too
    c4: str = MISSING  # paper | read_later: C4 only when a later nest reads what it writes
    i_compute: float | None = MISSING  # C5: compute-bound nests; null: off (the paper's rule)


@dataclass
class SimConfig:
    copy_model: str = MISSING  # a copy model (pimbuild.targets.pim.copymodels.COPY_MODELS)
    cores_sweep: list[int] = MISSING


@dataclass
class ExperimentConfig:
    """``+experiment=<name>`` (``conf/experiment/``; pimbuild.paper.experiments)."""

    name: str = MISSING  # the module of pimbuild.paper.experiments that tabulates it
    points: dict[str, list[str]] = MISSING  # point name -> the overrides of its build
    only: list[str] = field(default_factory=list)  # build only these points (empty: all)


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
    # The heterogeneous-GPU target (system=gpus): the device catalogue, the devices used (in
    # order: the first is the "left" device of a pair), the link and the target's factors.
    device: dict[str, DeviceConfig] = MISSING
    devices: list[str] = MISSING
    link: LinkConfig = MISSING
    tp_link: LinkConfig = MISSING  # joins a TP group's twins (AF with TP attention)
    gpus: GpusConfig = MISSING
    serve: ServeConfig = MISSING
    stages: list[str] = MISSING  # the stages to build, with everything they read
    store: str = MISSING  # the artifact store, relative to the launch directory
    show_candidates: bool = MISSING  # print the candidates table at the end of a run
    verify: bool = MISSING  # hash every file of an artifact before reusing it
    experiment: ExperimentConfig | None = None  # +experiment=<name>: build every point


SCHEMAS: dict[str, Any] = {
    "model": ModelConfig,
    "lowering": LoweringConfig,
    "platform": PlatformConfig,
    "profile": ProfileConfig,
    "system": SystemConfig,
    "pim": PimConfig,
    "policy": PolicyConfig,
    "sim": SimConfig,
    "device": DeviceConfig,
    "link": LinkConfig,
    "gpus": GpusConfig,
    "serve": ServeConfig,
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


# The range of every number in the schemas: (comparison, bound), or (comparison, bound, upper)
# where the value must also be <= upper. Checked with ``validate`` before any stage is
# planned; ``None`` is allowed where the schema says ``| None``.
RANGES: dict[str, tuple[Any, ...]] = {
    "model.seed": (">=", 0),
    "lowering.register_block": (">=", 1),
    "lowering.register_block_candidates": (">=", 1),
    "platform.cache_line": (">=", 1),
    "platform.l1d_bytes": (">=", 1),
    "platform.l1d_assoc": (">=", 1),
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
    "policy.theta_ratio": (">=", 0),
    "policy.theta_gbps": (">=", 0),
    "policy.sigma": (">=", 0),
    "policy.i_min": (">=", 0),
    "policy.i_compute": (">=", 0),
    "sim.cores_sweep": (">=", 1),
    "link.gbps": (">", 0),
    "link.latency_us": (">=", 0),
    "tp_link.gbps": (">", 0),
    "tp_link.latency_us": (">=", 0),
    "gpus.tensor_efficiency": (">", 0),
    "gpus.cuda_efficiency": (">", 0),
    "gpus.memory_efficiency": (">", 0),
    "gpus.comm_on_device": (">=", 0),
    "gpus.time_limit_s": (">", 0),
    "gpus.mip_gap": (">=", 0),
    "gpus.period": (">=", 1),
    "gpus.robust_samples": (">=", 0),
    "serve.output_len": (">=", 1),
    "serve.requests": (">=", 1),
    "serve.rate": (">", 0),
    "serve.depth": (">=", 1),
    "serve.slo_s_per_token": (">", 0),
    "serve.window_s": (">", 0),
    "serve.beta": (">", 0),
    "serve.stall_s": (">=", 0),
    "serve.splits": (">=", 1),
}
# Lists that mean nothing empty: what calibrate's search times, the stages to build, the
# counter backends ``auto`` tries (``sim.cores_sweep`` may be empty: the build's own
# ``pim.cores`` is always simulated).
NONEMPTY = ("lowering.register_block_candidates", "stages", "profile.auto")
# The same ranges for every device of the catalogue (device.<name>.<field>).
DEVICE_RANGES: dict[str, tuple[str, float]] = {
    "fp32_tflops": (">", 0), "bf16_tflops": (">", 0), "mem_gbps": (">", 0),
    "l2_mb": (">=", 0), "memory_gb": (">", 0), "launch_us": (">=", 0),
    "price_per_hour": (">", 0), "sms": (">=", 1), "boost_mhz": (">", 0), "tdp_w": (">", 0),
}


def _rule_field_of_a_planner(cfg: Any, key: str) -> bool:
    """The PIM rule's fields, which the GPU target's planners (policy=throughput, latency)
    share the ``policy`` group with but leave unset."""
    return key.startswith("policy.") and cfg.system.name != "pim"


def validate(cfg: Any) -> None:
    """Raise a ConfigError for the first value outside its range (or not finite), e.g.
    ``pim.cores must be >= 1 (got -4)``, or the first list of ``NONEMPTY`` that is empty."""
    import math

    from omegaconf import OmegaConf

    missing = sorted(k for k in OmegaConf.missing_keys(cfg) if not _rule_field_of_a_planner(cfg, k))
    if missing:
        more = f" (nor {', '.join(missing[1:4])}{', ...' if len(missing) > 4 else ''})" \
            if len(missing) > 1 else ""
        raise ConfigError(f"{missing[0]} has no value{more}: set it in its config file or on "
                          f"the command line ({missing[0]}=...)")
    for path in NONEMPTY:
        value = OmegaConf.select(cfg, path, throw_on_missing=False)
        if OmegaConf.is_list(value) and len(value) == 0:
            raise ConfigError(f"{path} is empty: name at least one")

    devices = OmegaConf.select(cfg, "device", throw_on_missing=False) or {}
    ranges = {**RANGES, **{f"device.{d}.{k}": r for d in devices
                           for k, r in DEVICE_RANGES.items()}}
    for path, (op, bound, *upper) in ranges.items():
        value = OmegaConf.select(cfg, path, throw_on_missing=False)
        values = list(value) if OmegaConf.is_list(value) else [value]
        for v in values:
            if v is None:
                continue
            ok = (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                  and (v >= bound if op == ">=" else v > bound))
            if ok and upper and v > upper[0]:
                raise ConfigError(f"{path} must be <= {upper[0]:g} (got {v})")
            if not ok:
                raise ConfigError(f"{path} must be {op} {bound:g} (got {v})")
