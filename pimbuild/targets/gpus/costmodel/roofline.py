"""Kernel time backend ``roofline``: a kernel's time on a device from its spec sheet.

    t = launch + max(flops / (peak * compute_efficiency), bytes / (mem_bw * memory_efficiency))

``peak`` is the tensor-core BF16 rate for a contraction when the served precision is bf16 or
fp16 (``gpus.precision``), else the FP32 CUDA-core rate; ``bytes`` are every buffer the kernel
reads and writes, at the served precision. The efficiencies (``gpus.*_efficiency``) are
assumptions documented in docs/design.md §10. The L2 capacity is not modelled: every byte
is charged at DRAM bandwidth.
"""

from __future__ import annotations

from typing import Any

from pimbuild.targets.gpus.costmodel.ddg import Kernel

TENSOR_PRECISIONS = ("bf16", "fp16")


def engine(kernel: Kernel, precision: str) -> str:
    return "tensor" if kernel.kind == "contraction" and precision in TENSOR_PRECISIONS \
        else "cuda"


def kernel_time(kernel: Kernel, device: Any, target: Any) -> float:
    """Seconds of ``kernel`` on ``device`` (a Device) under ``target`` (a GpuTarget)."""
    if engine(kernel, target.precision) == "tensor":
        peak = device.bf16_tflops * 1e12 * target.tensor_efficiency
    else:
        peak = device.fp32_tflops * 1e12 * target.cuda_efficiency
    moved = sum(kernel.reads.values()) + sum(kernel.writes.values())
    memory = moved / (device.mem_gbps * 1e9 * target.memory_efficiency)
    return device.launch_us * 1e-6 + max(kernel.flops / peak, memory)
