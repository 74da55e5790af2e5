"""Target ``gpus``: kernel-level disaggregation over heterogeneous GPUs (FluidGPU,
docs/design.md §10). Its pipeline is lower -> extract (kernels and their data dependency
graph) -> profile (kernel time per device) -> decide (a planner) -> reinsert (the partitioned
program run as one process per device, checked against eager) -> simulate; its parameters
are ``devices`` (names in the ``device`` catalogue, ``pimbuild/conf/device/*.yaml``), the ``link``
group and the ``gpus`` group.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, ClassVar

from pimbuild.core.errors import ConfigError
from pimbuild.core.stage import plain
from pimbuild.targets.gpus.costmodel.cost import Link

PRECISION_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass(frozen=True)
class Device:
    key: str  # its name in the catalogue (a100)
    name: str
    fp32_tflops: float
    bf16_tflops: float
    mem_gbps: float
    l2_mb: float
    memory_gb: float
    launch_us: float
    price_per_hour: float
    sms: int = 0  # what the fitted kernel-time model reads (0: not given)
    boost_mhz: float = 0.0
    tdp_w: float = 0.0
    measured_as: str | None = None  # its name in the shipped measured kernel data


@dataclass(frozen=True)
class GpuTarget:
    devices: tuple[Device, ...]
    link: Link
    link_name: str
    precision: str
    tensor_efficiency: float
    cuda_efficiency: float
    memory_efficiency: float
    comm_on_device: float

    pipeline: ClassVar[dict[str, str]] = {
        "lower": "pimbuild.frontend.lower", "extract": "pimbuild.targets.gpus.extract",
        "profile": "pimbuild.targets.gpus.profile", "decide": "pimbuild.targets.gpus.decide",
        "reinsert": "pimbuild.targets.gpus.reinsert", "simulate": "pimbuild.targets.gpus.simulate"}

    @classmethod
    def from_config(cls, cfg: Any) -> GpuTarget:
        catalogue = plain(cfg.device)
        names = list(cfg.devices)
        unknown = [n for n in names if n not in catalogue]
        if not names:
            raise ConfigError(f"devices is empty: name at least one device (choices: "
                              f"{', '.join(catalogue)})")
        if unknown:
            raise ConfigError(f"devices {unknown} not in the device catalogue "
                              f"(choices: {', '.join(catalogue)})")
        g = {k: v for k, v in plain(cfg.gpus).items()
             if k not in ("planner", "planner_options", "backend", "backend_options",
                          "time_limit_s", "mip_gap",  # decide and profile
                          "on_time_limit", "period", "kernel_model", "tables",
                          "robust_samples", "kernels")}
        if g["precision"] not in PRECISION_BYTES:
            raise ConfigError(f"gpus.precision '{g['precision']}' is not one of "
                              f"{', '.join(PRECISION_BYTES)}")
        keep = {f.name for f in fields(Device)} - {"key"}
        labels = [n if names.count(n) == 1 else f"{n}#{names[:i + 1].count(n)}"
                  for i, n in enumerate(names)]  # devices=[a100,a100,l40s]: a100#1, a100#2
        devices = tuple(Device(key=label, **{k: v for k, v in catalogue[n].items() if k in keep})
                        for label, n in zip(labels, names, strict=True))
        return cls(devices=devices, link=Link(cfg.link.gbps, cfg.link.latency_us),
                   link_name=cfg.link.name, **g)

    @classmethod
    def summarize(cls, cfg: Any, dirs: dict[str, Path], width: int) -> list[Any]:
        """What a build prints after its stages: the closing lines simulate wrote."""
        if "simulate" not in dirs:
            return []
        return json.loads((dirs["simulate"] / "report.json").read_text())["summary"]

    @property
    def float_scale(self) -> float:
        """Bytes of a served float over bytes of the IR's (float32)."""
        return PRECISION_BYTES[self.precision] / 4

    def describe(self) -> dict[str, Any]:
        return {"devices": [d.__dict__ for d in self.devices], "link": self.link_name,
                "link_gbps": self.link.gbps, "link_latency_us": self.link.latency_us,
                "precision": self.precision, "comm_on_device": self.comm_on_device}
