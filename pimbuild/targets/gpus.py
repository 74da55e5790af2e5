"""Target ``gpus`` (``system=gpus``): kernel-level disaggregation over heterogeneous GPUs
(FluidGPU). The package ``pimbuild.gpus`` implements it; its target class, with the stage
modules of its pipeline, is ``pimbuild.gpus.target.GpuTarget``."""

from pimbuild.gpus.target import GpuTarget

TARGET = GpuTarget
