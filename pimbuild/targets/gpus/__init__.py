"""Target ``gpus`` (``system=gpus``): kernel-level disaggregation over heterogeneous GPUs
(FluidGPU). This package owns the target: its class (``target.GpuTarget``, with the stage
modules of its pipeline), its stages (``extract``, ``profile``, ``decide``, ``reinsert``,
``simulate``), the planners (``planners/``), the cost and serving models and the kernel-time
model (``kerneltime``)."""

from pimbuild.targets.gpus.target import GpuTarget

TARGET = GpuTarget
