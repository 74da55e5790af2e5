"""Ops torch-mlir cannot lower, or lowers unlike ATen, written in ops it lowers (merged into
``frontend.decompositions``, so torch.export decomposes them before import).

Each one stopped ``lower`` on a scratch model ("cannot lower aten.median.dim", "failed to
legalize operation 'torch.aten.erfinv'") or differed from eager there (``maximum`` and the
clamps dropped a NaN), and is written as PyTorch's CPU kernel computes it, NaN included;
tests/test_recipes.py checks each against eager.
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


def _embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                   per_sample_weights=None, include_last_offset=False, padding_idx=None):
    """``nn.EmbeddingBag`` (a recommendation model's pooled lookups): each index's bag from the
    offsets as ATen's ``make_offset2bag`` finds it (a mark at each bag's start, summed), then
    its weight row added into (``sum``, ``mean``: divided by the bag's count) or maximised into
    (``max``) its bag; rows at ``padding_idx`` are left out, an empty bag is 0. The other
    results (used by the backward) are the bag of each index and the counts; ``max``'s indices
    are not computed (zeros)."""
    bags = offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]
    n, width = indices.shape[0], weight.shape[1]
    starts = offsets[:bags].long()
    marks = torch.zeros(n + 1, dtype=torch.int64).index_add(0, starts, torch.ones_like(starts))
    bag = (marks.cumsum(0) - 1)[:n]
    rows = weight[indices]
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(1)
    keep = torch.ones_like(indices, dtype=torch.bool) if padding_idx is None or padding_idx < 0 \
        else indices != padding_idx
    counts = torch.zeros(bags, dtype=torch.int64).index_add(0, bag, keep.long())
    if mode == 2:
        rows = torch.where(keep.unsqueeze(1), rows, -math.inf)
        out = torch.zeros(bags, width, dtype=weight.dtype).scatter_reduce(
            0, bag.unsqueeze(1).expand(n, width), rows, "amax", include_self=False)
        out = torch.where(counts.unsqueeze(1) > 0, out, 0.0)
        return out, bag, counts, torch.zeros(bags, width, dtype=torch.int64)
    rows = torch.where(keep.unsqueeze(1), rows, 0.0)
    out = torch.zeros(bags, width, dtype=weight.dtype).index_add(0, bag, rows)
    if mode == 1:
        out = out / counts.clamp(min=1).unsqueeze(1).to(out.dtype)
        return out, bag, counts, counts.clone()
    return out, bag[:0], torch.zeros_like(counts), torch.zeros_like(counts)


def _cdist(x1, x2, p: float, compute_mode: int | None = None):
    """``torch.cdist`` as ATen's ``cdist_impl`` computes it: for p = 2 with more than 25 rows
    (or ``compute_mode`` 1) by a matrix product, |a|^2 + |b|^2 - 2 a.b (``_euclidean_dist``);
    otherwise from the differences of every pair (p = 0 counts them, inf takes the largest)."""
    if p == 2 and (compute_mode == 1 or (compute_mode in (None, 0)
                                         and (x1.shape[-2] > 25 or x2.shape[-2] > 25))):
        norm1, norm2 = x1.pow(2).sum(-1, True), x2.pow(2).sum(-1, True)
        a = torch.cat((x1 * -2, norm1, torch.ones_like(norm1)), -1)
        b = torch.cat((x2, torch.ones_like(norm2), norm2), -1)
        return (a @ b.transpose(-1, -2)).clamp_min(0).sqrt()
    diff = (x1.unsqueeze(-2) - x2.unsqueeze(-3)).abs()
    if p == 0:
        return (diff != 0).sum(-1).to(x1.dtype)
    if p == math.inf:
        return diff.amax(-1)
    if p == 1:
        return diff.sum(-1)
    if p == 2:
        return (diff * diff).sum(-1).sqrt()
    return diff.pow(p).sum(-1).pow(1.0 / p)


def _hypot(self, other):
    """sqrt(x^2 + y^2) without overflow or underflow in the squares, as C's ``hypot``: the
    larger magnitude times sqrt(1 + (smaller / larger)^2); an infinity wins over a NaN."""
    x, y = torch.abs(self), torch.abs(other)
    larger, smaller = torch.maximum(x, y), torch.minimum(x, y)
    ratio = torch.where(larger == 0, 0.0, smaller / larger)
    result = larger * torch.sqrt(1.0 + ratio * ratio)
    return torch.where(torch.isinf(x) | torch.isinf(y), math.inf, result)


def _maximum(self, other):
    """The larger, NaN if either is (as ATen's): torch-mlir lowers ``maximum`` to
    ``select(a > b, a, b)``, which is ``b`` where ``a`` is NaN."""
    pick = self > other
    if self.is_floating_point():
        pick = pick | self.isnan()
    return torch.where(pick, self, other)


def _minimum(self, other):
    pick = self < other
    if self.is_floating_point():
        pick = pick | self.isnan()
    return torch.where(pick, self, other)


def _clamp(self, min=None, max=None):
    """``clamp`` with NaN kept (torch-mlir's clamps returned the bound for it), and a NaN
    tensor bound giving NaN, as ATen's ``min(max(x, lo), hi)`` does."""
    result = self
    if min is not None:
        result = (_maximum(result, min) if isinstance(min, torch.Tensor)
                  else torch.where(result < min, min, result))
    if max is not None:
        result = (_minimum(result, max) if isinstance(max, torch.Tensor)
                  else torch.where(result > max, max, result))
    return result


def _arg_extreme(x, dim, keepdim: bool, largest: bool):
    """The index of the first largest (smallest) element along ``dim``, or of the first NaN
    where there is one, as ATen's argmax (argmin) returns it: the extreme by ``amax``
    (``amin``), which keeps NaN, then the first place that holds it. torch-mlir's own
    argmax compares with ``>`` and so passes over a NaN."""
    if dim is None:  # over all elements; keepdim keeps every dimension, at 1
        index = _arg_extreme(x.flatten(), 0, False, largest)
        return index.reshape([1] * x.dim()) if keepdim else index
    dim = dim % max(x.dim(), 1)
    n = x.shape[dim] if x.dim() else 1
    extreme = x.amax(dim, keepdim=True) if largest else x.amin(dim, keepdim=True)
    hit = x == extreme
    if x.is_floating_point():
        nan = x.isnan()
        hit = torch.where(nan.any(dim, keepdim=True), nan, hit)
    shape = [n if d == dim else 1 for d in range(x.dim())]
    rank = (n - torch.arange(n)).reshape(shape)  # the first hit has the highest rank
    return n - (hit * rank).amax(dim, keepdim=keepdim)


def _max_dim(x, dim, keepdim=False):
    return x.amax(dim, keepdim), _arg_extreme(x, dim, keepdim, True)


def _min_dim(x, dim, keepdim=False):
    return x.amin(dim, keepdim), _arg_extreme(x, dim, keepdim, False)


TABLE = {aten.searchsorted.Tensor: _searchsorted,
         aten.searchsorted.Scalar: _searchsorted_scalar,
         aten.median.dim: _median_dim, aten.median.default: _median,
         aten.copysign.Tensor: _copysign, aten.copysign.Scalar: _copysign_scalar,
         aten.signbit.default: _signbit,
         aten.erfinv.default: _erfinv, aten.sort.stable: _stable_sort,
         aten.embedding_bag.padding_idx: _embedding_bag, aten.embedding_bag.default: _embedding_bag,
         aten._embedding_bag.default: _embedding_bag,
         aten._embedding_bag_forward_only.default: _embedding_bag,
         aten._cdist_forward.default: _cdist, aten.hypot.default: _hypot,
         aten.maximum.default: _maximum, aten.minimum.default: _minimum,
         aten.clamp.default: _clamp, aten.clamp.Tensor: _clamp,
         aten.clamp_min.default: lambda self, min: _clamp(self, min=min),
         aten.clamp_min.Tensor: lambda self, min: _clamp(self, min=min),
         aten.clamp_max.default: lambda self, max: _clamp(self, max=max),
         aten.clamp_max.Tensor: lambda self, max: _clamp(self, max=max),
         aten.hardtanh.default: lambda self, min_val=-1.0, max_val=1.0: _clamp(self, min_val,
                                                                                max_val),
         aten.hardsigmoid.default: lambda self: _clamp(self + 3.0, 0.0, 6.0) / 6.0,
         aten.argmax.default: lambda self, dim=None, keepdim=False: _arg_extreme(
             self, dim, keepdim, True),
         aten.argmin.default: lambda self, dim=None, keepdim=False: _arg_extreme(
             self, dim, keepdim, False),
         aten.max.dim: _max_dim, aten.min.dim: _min_dim}
