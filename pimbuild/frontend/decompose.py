"""The decompositions the export applies: ATen's CPU formulas for the norms (moments in
float32), long sums in levels, scans in float64, and the overloads that take tensors for
scalars."""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    pass


def _gelu_tanh(x: torch.Tensor, approximate: str = "none"):
    """``aten.gelu(approximate='tanh')`` as PyTorch's reference decomposes it. torch-mlir's
    own lowering takes sqrt(2/pi) as 0.797724 (pi = 22/7, 2e-4 off), which put a GELU-tanh
    MLP 8e-5 from eager. The erf form is left to torch-mlir (``NotImplemented``)."""
    if approximate != "tanh":
        return NotImplemented
    from torch._refs.nn.functional import gelu

    return gelu(x, approximate=approximate)


def _moments(x: torch.Tensor, dims: list[int], eps: float):
    """Mean and 1 / sqrt(biased variance + eps) over ``dims`` in ``x``'s dtype, two passes
    (the second over ``x - mean``)."""
    mean = x.mean(dims, keepdim=True)
    deviation = x - mean  # squared as a product: square() lowers to math.fpowi, a libcall
    return mean, torch.rsqrt((deviation * deviation).mean(dims, keepdim=True) + eps)


def _native_layer_norm(input: torch.Tensor, normalized_shape, weight, bias, eps: float):
    """``aten.native_layer_norm`` as ATen's CPU kernel computes it: moments in float32 (the
    computation type of float32, float16 and bfloat16), ``x * rstd - mean * rstd``, then
    weight and bias. PyTorch's reference calls ``var_mean``, which torch-mlir computes in
    float64: a float64 copy of the input and of its squared deviations, 1.9-2.8x eager's time
    for a 64 x 4096 LayerNorm (docs/design.md §9). float64 input keeps the reference."""
    if input.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return NotImplemented
    x = input.to(torch.float32)
    mean, rstd = _moments(x, list(range(x.ndim - len(normalized_shape), x.ndim)), eps)
    out = x * rstd - mean * rstd
    out = out if weight is None else out * weight
    out = out if bias is None else out + bias
    return out.to(input.dtype), mean.to(input.dtype), rstd.to(input.dtype)


def _native_group_norm(input: torch.Tensor, weight, bias, batch: int, channels: int,
                       inner: int, groups: int, eps: float):
    """``aten.native_group_norm`` with ``_native_layer_norm``'s moments: ATen's CPU kernel
    also accumulates a float32 group norm in float32."""
    if input.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return NotImplemented
    x = input.to(torch.float32).reshape(batch, groups, channels // groups, inner)
    mean, rstd = _moments(x, [2, 3], eps)
    out = (x * rstd - mean * rstd).reshape(input.shape)
    per_channel = [1, channels] + [1] * (input.ndim - 2)
    out = out if weight is None else out * weight.reshape(per_channel)
    out = out if bias is None else out + bias.reshape(per_channel)
    return (out.to(input.dtype), mean.reshape(batch, groups).to(input.dtype),
            rstd.reshape(batch, groups).to(input.dtype))


# A float sum of at least LONG_SUM terms is summed in levels, each of fewer: its dimensions
# one at a time (the innermost first), and one dimension of LONG_SUM or more in blocks of up
# to SUM_BLOCK that divide it (the blocks' sums first, then theirs). torch-mlir's single
# reduction adds every term to one running sum; eager sums in a cascade. Column sums of
# 262144 rows near 1000 were 3.4e-3 from a float64 run, eager's 5e-8 (docs/design.md §9).
LONG_SUM = 1 << 16
SUM_BLOCK = 256


def _reduced(x: torch.Tensor, dims) -> list[int]:
    """``dims`` of ``x`` as non-negative indices, innermost first (all of them for None or
    [], as ``aten.sum`` reads them)."""
    return sorted({d % x.ndim for d in dims} if dims else range(x.ndim), reverse=True)


def _long_sum(x: torch.Tensor, dims, keepdim: bool = False, *, dtype=None):
    """``aten.sum.dim_IntList`` in levels where it adds ``LONG_SUM`` terms or more; else (and
    for integers, and one dimension of a prime length) torch-mlir's own."""
    if x.ndim == 0 or not (dtype or x.dtype).is_floating_point:
        return NotImplemented  # decided before any op, which tracing would keep
    reduced = _reduced(x, dims)
    n = x.shape[reduced[0]]
    if math.prod(x.shape[d] for d in reduced) < LONG_SUM \
            or len(reduced) == 1 and (n < LONG_SUM or _block(n) is None):
        return NotImplemented
    y = x if dtype is None else x.to(dtype)
    for d in reduced:
        b = _block(y.shape[d]) if y.shape[d] >= LONG_SUM else None
        if b is not None:
            y = y.unflatten(d, (y.shape[d] // b, b)).sum(d + 1)
        y = y.sum(d, keepdim=True)
    return y if keepdim else y.squeeze(reduced)


def _block(n: int) -> int | None:
    """The largest block of at most ``SUM_BLOCK`` terms that divides ``n`` (None: a prime)."""
    return next((b for b in range(min(SUM_BLOCK, n - 1), 1, -1) if n % b == 0), None)


def _long_mean(x: torch.Tensor, dims, keepdim: bool = False, *, dtype=None):
    """``aten.mean.dim`` as ``_long_sum`` over the count, where that sums in levels."""
    total = _long_sum(x, dims, keepdim, dtype=dtype)
    if total is NotImplemented:
        return NotImplemented
    return total / math.prod(x.shape[d] for d in _reduced(x, dims))


def _scan_in_float64(op):
    """``op`` (``aten.cumsum`` or ``aten.cumprod``) of a narrower float accumulated in
    float64, as ATen's CPU kernels accumulate it (``acc_type`` of float is double), then
    cast back. torch-mlir's scan accumulates in the element type: a cumulative sum of 2^20
    values in [0, 1) was 3.0e-5 from a float64 run, eager 6e-8."""
    def scan(x: torch.Tensor, dim: int, *, dtype=None):
        out = dtype or x.dtype
        if not out.is_floating_point or out == torch.float64:
            return NotImplemented
        return op(x.to(torch.float64), dim).to(out)
    return scan


def _constant_pad_nd(x: torch.Tensor, pad, value=0):
    """``aten.constant_pad_nd`` with a negative amount (``F.pad(x, (-2, 1))`` crops 2 from
    the start of the last dimension) as a slice, then the padding that is left. torch-mlir
    lowers the negative amount to a ``tensor.pad`` that bufferization refuses."""
    if all(amount >= 0 for amount in pad):
        return NotImplemented
    for i in range(0, len(pad), 2):
        d, before, after = x.ndim - 1 - i // 2, -min(pad[i], 0), -min(pad[i + 1], 0)
        x = x.narrow(d, before, x.shape[d] - before - after)
    kept = [max(amount, 0) for amount in pad]
    return torch.ops.aten.constant_pad_nd(x, kept, value) if any(kept) else x.clone()


def _scalar_as_tensor(tensor_op, positions: list[int]):
    """A Scalar overload computed by ``tensor_op``, the Python numbers at ``positions`` made 0-d
    tensors of their own kind (bool, int64 or float32): a 0-d tensor takes part in type
    promotion as a Python number does, so the result's dtype is the same."""
    def run(*args, **kwargs):
        args = list(args)
        for i in positions:
            value = args[i]
            kind = (torch.bool if isinstance(value, bool) else
                    torch.int64 if isinstance(value, int) else torch.get_default_dtype())
            args[i] = torch.full((), value, dtype=kind)
        return tensor_op(*args, **kwargs)
    return run


@functools.cache
def tensor_overloads() -> dict:
    """A decomposition for each ``aten.X.Scalar`` that torch-mlir does not define where it
    defines ``aten.X.Tensor`` with the same schema but Tensor for Scalar (``x | 3`` is
    ``bitwise_or.Scalar``, which torch-mlir 20261001 cannot lower, ``x | t`` lowers); found
    by asking the torch dialect which ops it registers, not from a list. An op whose tensor
    form has no lowering either (``copysign``) still fails, at the number's 0-d tensor
    "from aten.copysign.Scalar" and the node's name."""
    from pimbuild.frontend import mlir

    ctx, table = mlir.new_context(), {}
    for name in dir(torch.ops.aten):
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        if {"Scalar", "Tensor"} - set(packet.overloads()):
            continue
        if (ctx.is_registered_operation(f"torch.aten.{name}.Scalar")
                or not ctx.is_registered_operation(f"torch.aten.{name}.Tensor")):
            continue
        scalar, tensor = packet.Scalar, packet.Tensor
        if (scalar._schema.is_mutable  # in place: functionalized before decomposition
                or len(scalar._schema.arguments) != len(tensor._schema.arguments)):
            continue
        pairs = list(zip(scalar._schema.arguments, tensor._schema.arguments, strict=True))
        moved = [i for i, (a, b) in enumerate(pairs) if str(a.type) != str(b.type)]
        if moved and all(a.name == b.name for a, b in pairs) and all(
                pairs[i][0].type.kind() == "NumberType" and pairs[i][1].type.kind() == "TensorType"
                for i in moved):
            table[scalar] = _scalar_as_tensor(tensor, moved)
    return table


def decompositions() -> dict:
    """torch-mlir's decomposition table, with pimbuild's corrections, ``tensor_overloads``
    and ``substitutes`` (ops torch-mlir cannot lower, or lowers unlike ATen)."""
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    from pimbuild.frontend import substitutes

    aten = torch.ops.aten
    return {**get_decomposition_table(), **tensor_overloads(), aten.gelu.default: _gelu_tanh,
            aten.native_layer_norm.default: _native_layer_norm,
            aten.native_group_norm.default: _native_group_norm,
            aten.constant_pad_nd.default: _constant_pad_nd,
            aten.sum.dim_IntList: _long_sum, aten.mean.dim: _long_mean,
            aten.mean.default: lambda x, *, dtype=None: _long_mean(x, None, dtype=dtype),
            aten.cumsum.default: _scan_in_float64(aten.cumsum.default),
            aten.cumprod.default: _scan_in_float64(aten.cumprod.default),
            **substitutes.TABLE}
