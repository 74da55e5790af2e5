"""Ops torch-mlir cannot lower, written in ops it can (merged into
``frontend.decompositions``, so torch.export decomposes them before import).

Each one stopped ``lower`` on a scratch model ("cannot lower aten.median.dim", "failed to
legalize operation 'torch.aten.erfinv'") and is written as PyTorch's CPU kernel computes it,
NaN included; tests/test_recipes.py checks each against eager.
"""

from __future__ import annotations

import math

import torch

aten = torch.ops.aten


def _searchsorted(sorted_sequence, self, *, out_int32=False, right=False, side=None,
                  sorter=None):
    """Each value's insertion index: how many of the sequence's elements lie below it (at or
    below it, on the right side), counted by comparing with all of them; a NaN value goes
    last, as in ATen's binary search."""
    seq = sorted_sequence if sorter is None else torch.gather(sorted_sequence, -1, sorter)
    rows = seq if seq.dim() == 1 else seq.unsqueeze(-2)
    values = self.unsqueeze(-1)
    below = rows <= values if right or side == "right" else rows < values
    count = below.sum(-1, dtype=torch.int32 if out_int32 else torch.int64)
    return torch.where(self.isnan(), seq.shape[-1], count) if self.is_floating_point() \
        else count


def _searchsorted_scalar(sorted_sequence, self, **kwargs):
    number = torch.scalar_tensor(self, dtype=sorted_sequence.dtype)
    return _searchsorted(sorted_sequence, number, **kwargs)


def _median_dim(self, dim: int = 0, keepdim: bool = False):
    """The lower median along ``dim`` and its index, from a sort; a slice holding NaN gives
    NaN and the index of its first NaN, as ATen's kernel does."""
    if self.dim() == 0:
        return self.clone(), torch.zeros((), dtype=torch.int64)
    values, indices = torch.sort(self, dim)
    k = (self.shape[dim] - 1) // 2
    value, index = values.narrow(dim, k, 1), indices.narrow(dim, k, 1)
    if self.is_floating_point():
        nan = self.isnan()
        has_nan = nan.any(dim, keepdim=True)
        value = torch.where(has_nan, math.nan, value)
        index = torch.where(has_nan, nan.to(torch.int8).argmax(dim, keepdim=True), index)
    if not keepdim:
        value, index = value.squeeze(dim), index.squeeze(dim)
    return value, index


def _median(self):
    return _median_dim(self.flatten(), 0)[0]


def _copysign(self, other):
    """|self| with the sign bit of ``other`` (of -0.0 too)."""
    dtype = torch.result_type(self, other)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    magnitude = torch.abs(self.to(dtype))
    return torch.where(_signbit(other), -magnitude, magnitude)


def _signbit(x):
    """``torch.signbit`` (which torch-mlir cannot lower, nor a view of a float's bits as an
    integer): below zero, or a zero whose reciprocal is -inf. A NaN counts as positive,
    whatever its sign bit."""
    if not x.is_floating_point():
        return x < 0
    return (x < 0) | ((x == 0) & (1.0 / x < 0))


def _copysign_scalar(self, other):
    dtype = self.dtype if self.is_floating_point() else torch.get_default_dtype()
    magnitude = torch.abs(self.to(dtype))
    return -magnitude if math.copysign(1.0, other) < 0 else magnitude


# ATen's calc_erfinv (aten/src/ATen/native/Math.h): a rational approximation in two ranges,
# then two Newton steps on erf.
ERFINV_A = (0.886226899, -1.645349621, 0.914624893, -0.140543331)
ERFINV_B = (-2.118377725, 1.442710462, -0.329097515, 0.012229801)
ERFINV_C = (-1.970840454, -1.624906493, 3.429567803, 1.641345311)
ERFINV_D = (3.543889200, 1.637067800)


def _erfinv(self):
    y = self if self.is_floating_point() else self.to(torch.get_default_dtype())
    y_abs = y.abs()
    z = y * y
    central = y * _poly(ERFINV_A, z) / (_poly(ERFINV_B, z) * z + 1.0)
    w = torch.sqrt(-torch.log((1.0 - y_abs.clamp(max=1.0)) / 2.0))
    tail = torch.where(y < 0, -1.0, 1.0) * _poly(ERFINV_C, w).abs() / (_poly(ERFINV_D, w) * w + 1.0)
    x = torch.where(y_abs <= 0.7, central, tail)
    for _ in range(2):
        x = x - (torch.erf(x) - y) / (2.0 / math.sqrt(math.pi) * torch.exp(-x * x))
    x = torch.where(y_abs == 1.0, torch.where(y < 0, -math.inf, math.inf), x)
    return torch.where(y_abs > 1.0, math.nan, x)


def _poly(coefficients: tuple[float, ...], z):
    """c0 + c1 z + c2 z^2 + ..., by Horner's rule."""
    result = coefficients[-1] * z
    for c in reversed(coefficients[1:-1]):
        result = (result + c) * z
    return result + coefficients[0]


def _stable_sort(self, *, stable=None, dim=-1, descending=False):
    """``sort(stable=True)`` (argsort's too): torch-mlir has only the default sort, which it
    lowers to a bubble sort that swaps only out-of-order neighbours, so it is stable already;
    but a NaN compares false both ways there and lands anywhere. So floats are sorted with NaN
    as +inf, then the NaNs moved behind the rest (ahead, descending) by a second stable sort
    on a NaN flag, as ATen orders them."""
    if not self.is_floating_point() or self.dim() == 0:
        return aten.sort.default(self, dim, descending)
    nan = self.isnan()
    _, order = aten.sort.default(torch.where(nan, math.inf, self), dim, descending)
    _, behind = aten.sort.default(nan.gather(dim, order).to(torch.int8), dim, descending)
    order = order.gather(dim, behind)
    return self.gather(dim, order), order


TABLE = {aten.searchsorted.Tensor: _searchsorted,
         aten.searchsorted.Scalar: _searchsorted_scalar,
         aten.median.dim: _median_dim, aten.median.default: _median,
         aten.copysign.Tensor: _copysign, aten.copysign.Scalar: _copysign_scalar,
         aten.signbit.default: _signbit,
         aten.erfinv.default: _erfinv, aten.sort.stable: _stable_sort}
