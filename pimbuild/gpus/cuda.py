"""Kernel time backend ``cuda``: each kernel timed on this machine's GPU with CUDA events.

Only where ``torch.cuda.is_available()``; elsewhere it refuses with a StageError naming why.
The kernel is replayed as a torch operation of the same class and sizes (a GEMM for a
contraction, a streaming copy of its bytes otherwise), which is what this backend measures
until per-kernel code generation for GPUs exists (docs/design.md §10).
"""

from __future__ import annotations

from typing import Any

from pimbuild.errors import StageError


def kernel_times(graph: Any, target: Any) -> list[list[float]]:
    import torch

    if not torch.cuda.is_available():
        raise StageError("profile", "profile.backend=cuda needs a CUDA GPU, and "
                         "torch.cuda.is_available() is false on this machine; use "
                         "profile.backend=roofline")
    raise StageError("profile", "profile.backend=cuda is not implemented yet: it needs a GPU "
                     "to be developed against; use profile.backend=roofline")
