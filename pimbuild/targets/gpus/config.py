"""The GPU target's config groups (``device``, ``link`` and ``tp_link``, ``gpus``, ``serve``):
their schemas and the ranges of their numbers. ``pimbuild.build.config`` composes them with the
other groups."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from omegaconf import MISSING

from pimbuild.core.schema import model_of


@dataclass
class DeviceConfig:
    """One GPU of the heterogeneous-GPU target (``pimbuild/conf/device/*.yaml``, spec-sheet
    numbers)."""

    name: str = MISSING
    fp32_tflops: float = MISSING  # CUDA cores
    bf16_tflops: float = MISSING  # tensor cores, dense
    mem_gbps: float = MISSING  # DRAM (HBM / GDDR) bandwidth
    l2_mb: float = MISSING
    memory_gb: float = MISSING
    launch_us: float = MISSING  # per-kernel launch overhead
    price_per_hour: float = MISSING  # USD per GPU-hour: Perf/$
    # What the fitted kernel-time model reads beside the above
    # (pimbuild/targets/gpus/model.py)
    sms: int = MISSING  # streaming multiprocessors
    boost_mhz: float = MISSING  # boost clock
    tdp_w: float = MISSING  # board power limit
    # its name in the shipped measured kernel data (kerneltime/data/devices.csv); None: none
    measured_as: str | None = None


@dataclass
class LinkConfig:
    name: str = MISSING
    gbps: float = MISSING  # bandwidth in each direction
    latency_us: float = MISSING  # per transfer


@dataclass
class GpusConfig:
    planner: str = MISSING  # throughput | latency | a planner module (planners/)
    planner_options: dict[str, Any] = MISSING  # the planner's own (its Options dataclass)
    backend: str = MISSING  # the profile stage's kernel-time backend (backends/)
    backend_options: dict[str, Any] = MISSING  # the backend's own (its Options dataclass)
    precision: str = MISSING  # bf16 | fp16 | fp32: the served model's element type
    tensor_efficiency: float = MISSING
    cuda_efficiency: float = MISSING
    memory_efficiency: float = MISSING
    comm_on_device: float = MISSING
    time_limit_s: float = MISSING  # a planner's MILP stops after this long
    mip_gap: float = MISSING  # 0: proven optimal placements; else a relative gap to accept
    on_time_limit: str = MISSING  # error | best: fail, or keep the best placement and its gap
    period: int = MISSING  # layers planned jointly; the placement repeats every period layers
    kernels: str = MISSING  # engine | lowered: the kernels placed (extract)
    kernel_model: str | None = MISSING  # gpus.backend=fitted: a fit's JSON (null: shipped)
    tables: list[str] = MISSING  # gpus.backend=table: kernel-time tables (JSON files)
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


SCHEMAS: dict[str, Any] = {"device": DeviceConfig, "link": LinkConfig, "gpus": GpusConfig,
                          "serve": ServeConfig}
# The range of every number of these groups: (comparison, bound), or (comparison, bound,
# upper) where the value must also be <= upper (``pimbuild.build.config.validate``).
RANGES: dict[str, tuple[Any, ...]] = {
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
    "serve.seed": (">=", 0),
    "serve.rate": (">", 0),
    "serve.depth": (">=", 1),
    "serve.slo_s_per_token": (">", 0),
    "serve.window_s": (">", 0),
    "serve.beta": (">", 0),
    "serve.stall_s": (">=", 0),
    "serve.splits": (">=", 1),
}
NONEMPTY: tuple[str, ...] = ()
# The same ranges for every device of the catalogue (device.<name>.<field>), and of a device
# file read outside a build (``DeviceFile``): from what no GPU is below (a GFLOP/s, a MB/s,
# a MHz) to a thousand times today's largest; a value outside is a unit slip, and the
# kernel-time model's terms would overflow.
DEVICE_RANGES: dict[str, tuple[Any, ...]] = {
    "fp32_tflops": (">=", 1e-3, 1e5), "bf16_tflops": (">=", 1e-3, 1e6),
    "mem_gbps": (">=", 1e-3, 1e7), "l2_mb": (">=", 1e-3, 1e5), "memory_gb": (">=", 1e-3, 1e6),
    "launch_us": (">=", 0, 1e6), "price_per_hour": (">=", 1e-6, 1e6), "sms": (">=", 1, 1e5),
    "boost_mhz": (">=", 1, 1e6), "tdp_w": (">=", 1e-3, 1e6),
}


# A device file (``pimbuild/conf/device/*.yaml``, or a user's ``--config-dir``'s ``device/``) read
# outside a build (``pimbuild-kernels predict``, ``pimbuild-serve``): the device schema's
# fields with the same ranges, checked by ``pimbuild.core.schema.check``.
DeviceFile = model_of(DeviceConfig, DEVICE_RANGES, "DeviceFile")
