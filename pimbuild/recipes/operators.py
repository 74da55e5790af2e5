"""The paper's evaluation set (Torch-PIM Table 3): tensor operators and layers of operators.

Sizes are keyword arguments with defaults; ``pimbuild/conf/model/<name>.yaml`` sets them.
Each builder
is called under a fixed ``torch.manual_seed`` by the lower stage, so inputs are reproducible.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from pimbuild.recipes import Recipe


class _Fn(nn.Module):
    """A module whose forward is a plain function of its inputs."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor) -> torch.Tensor:
        return self.fn(*xs)


def _vec(n: int) -> torch.Tensor:
    return torch.randn(n)


# --- elementwise / streaming ------------------------------------------------------------

def ew_add(n: int = 1 << 20) -> Recipe:
    return Recipe(_Fn(torch.add), {"a": _vec(n), "b": _vec(n)})


def copying(n: int = 1 << 20) -> Recipe:
    """Copy one buffer into another: the result is the input itself, so the lowered
    program copies the source buffer into the caller's output buffer (one copy nest)."""
    return Recipe(_Fn(lambda src, dst: torch.ops.aten.copy(dst, src)),
                  {"src": _vec(n), "dst": torch.zeros(n)})


def scale(n: int = 1 << 20, alpha: int = 3) -> Recipe:
    return Recipe(_Fn(lambda x: x * float(alpha)), {"x": _vec(n)})


def zeroing(n: int = 1 << 20) -> Recipe:
    """Fill a buffer of n elements with a scalar (zero) given at run time: a write-only nest.
    A constant zeros tensor would fold into a dense constant and leave no loop."""
    return Recipe(_Fn(lambda value: value.expand(n).contiguous()), {"value": torch.zeros(())})


def relu(n: int = 1 << 20) -> Recipe:
    return Recipe(_Fn(torch.relu), {"x": _vec(n)})


# --- transcendental ---------------------------------------------------------------------

def silu(n: int = 1 << 20) -> Recipe:
    return Recipe(_Fn(F.silu), {"x": _vec(n)})


def gelu(n: int = 1 << 20) -> Recipe:
    return Recipe(_Fn(F.gelu), {"x": _vec(n)})


def tanh(n: int = 1 << 20) -> Recipe:
    return Recipe(_Fn(torch.tanh), {"x": _vec(n)})


# --- reduction / normalization ----------------------------------------------------------

def softmax(rows: int = 64, cols: int = 4096) -> Recipe:
    return Recipe(_Fn(lambda x: torch.softmax(x, dim=-1)), {"x": torch.randn(rows, cols)})


def layernorm(tokens: int = 64, hidden: int = 4096) -> Recipe:
    norm = nn.LayerNorm(hidden)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    return Recipe(norm, {"x": torch.randn(tokens, hidden)})


class RMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.randn(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rmsnorm(tokens: int = 64, hidden: int = 4096) -> Recipe:
    return Recipe(RMSNorm(hidden), {"x": torch.randn(tokens, hidden)})


# --- GEMM / convolution primitives ------------------------------------------------------

def mac(rows: int = 256, n: int = 4096) -> Recipe:
    """Row-wise multiply-accumulate: acc[i] = sum_j a[i, j] * b[i, j]."""
    return Recipe(_Fn(lambda a, b: (a * b).sum(dim=-1)),
                  {"a": torch.randn(rows, n), "b": torch.randn(rows, n)})


def gemv(m: int = 4096, n: int = 4096) -> Recipe:
    """y = W x, written as a thin matmul (torch.mv would decompose into a product nest that
    materializes W * x and a separate row sum)."""
    return Recipe(_Fn(lambda w, x: (w @ x.unsqueeze(-1)).squeeze(-1)),
                  {"w": torch.randn(m, n), "x": torch.randn(n)})


def matmul(n: int = 256) -> Recipe:
    return Recipe(_Fn(torch.mm), {"a": torch.randn(n, n), "b": torch.randn(n, n)})


def depthwise_conv(channels: int = 64, height: int = 56, width: int = 56,
                   kernel: int = 3) -> Recipe:
    conv = nn.Conv2d(channels, channels, kernel, padding=kernel // 2, groups=channels,
                     bias=False)
    return Recipe(conv, {"x": torch.randn(1, channels, height, width)})


# --- layers of tensor operators ---------------------------------------------------------

class DecodeAttention(nn.Module):
    """Single-head attention for one decode step, no projections: softmax(q K^T / sqrt(d)) V."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = torch.matmul(q, k.transpose(0, 1)) / math.sqrt(q.shape[-1])
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def attention(kv_len: int = 1024, head_dim: int = 128) -> Recipe:
    return Recipe(DecodeAttention(), {"q": torch.randn(1, head_dim),
                                      "k": torch.randn(kv_len, head_dim),
                                      "v": torch.randn(kv_len, head_dim)})


class MLP(nn.Module):
    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.up = nn.Linear(hidden, ffn, bias=False)
        self.down = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def mlp(batch: int = 1, hidden: int = 1024, ffn: int = 4096) -> Recipe:
    return Recipe(MLP(hidden, ffn), {"x": torch.randn(batch, hidden)})
