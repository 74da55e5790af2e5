"""Comparing a lowered program's results with PyTorch eager's: every target's reinsert stage
fails unless its program's outputs are within ``tolerance`` of eager's by ``difference``."""

from __future__ import annotations

import numpy as np

RTOL = 1e-5
# A program that computes in a narrower float type is held to that type's tolerance
# (torch.testing's rtol for it): its ops round where eager's fused kernels may not (a bf16
# softmax rounds its exp, sum and quotient; eager rounds once).
FLOAT_TYPES = {"f64": RTOL, "f32": RTOL, "f16": 1e-3, "bf16": 1.6e-2}


def tolerance(signature: dict) -> float:
    """The check's tolerance for a lowered program: its narrowest float type's
    (``signature.json`` ``float_types``, which ``lower`` records)."""
    return max([RTOL] + [FLOAT_TYPES[t] for t in signature.get("float_types", ())])


def difference(got: np.ndarray, want: np.ndarray) -> float:
    """How far ``got`` is from eager's ``want``: the largest error relative to ``want``'s
    largest finite magnitude for floats, with NaN and infinities required at the same places;
    integers and booleans must be equal. ``inf`` when they disagree in kind, shape or dtype;
    never NaN, so a check against it cannot pass vacuously."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return float("inf")
    if got.size == 0:
        return 0.0
    if not np.issubdtype(want.dtype, np.floating):
        return 0.0 if np.array_equal(got, want) else float("inf")
    finite = np.isfinite(want)
    if not np.array_equal(finite, np.isfinite(got)) or not np.array_equal(
            got[~finite], want[~finite], equal_nan=True):
        return float("inf")
    if not finite.any():
        return 0.0
    scale = max(float(np.abs(want[finite]).max()), 1e-30)
    return float(np.abs(got[finite].astype(np.float64) - want[finite]).max()) / scale
