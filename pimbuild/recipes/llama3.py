"""A Llama-3-8B decoder layer (grouped-query attention: 32 query heads share 8 key/value
heads; FFN 14336), for the heterogeneous-GPU workloads of FluidGPU (docs/design.md §10).

``llama3_8b``: one decode step of a batch of ``batch`` requests, each with a KV cache of
``kv_len`` past positions as inputs; it returns the layer's output and the new tokens' keys
and values. ``llama3_8b_prefill``: one request's prompt of ``tokens`` positions with a
causal mask. Both are one of ``layers`` identical layers (Recipe.layers). Random weights from
the caller's seed.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from pimbuild.recipes import Recipe
from pimbuild.recipes.llm import _angles, _init, _rotate_half
from pimbuild.recipes.operators import RMSNorm


class GqaAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def _split(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, heads, self.head_dim).transpose(1, 2)

    def _repeat(self, x: torch.Tensor) -> torch.Tensor:
        """[b, kv_heads, s, d] -> [b, heads, s, d]: each key/value head serves a group."""
        b, _, s, d = x.shape
        group = self.heads // self.kv_heads
        return x[:, :, None].expand(b, self.kv_heads, group, s, d).reshape(b, self.heads, s, d)

    def forward(self, x, k_past, v_past, cos, sin, mask):
        q = self._split(self.q_proj(x), self.heads)
        k = self._split(self.k_proj(x), self.kv_heads)
        v = self._split(self.v_proj(x), self.kv_heads)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        keys = torch.cat((k_past, k), dim=2) if k_past is not None else k
        values = torch.cat((v_past, v), dim=2) if v_past is not None else v
        scores = torch.matmul(q, self._repeat(keys).transpose(-1, -2)) / math.sqrt(
            self.head_dim)
        if mask is not None:
            scores = scores + mask
        out = torch.matmul(torch.softmax(scores, dim=-1), self._repeat(values))
        b, _, t, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1)), k, v


class Llama3Layer(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, ffn: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(hidden)
        self.self_attn = GqaAttention(hidden, heads, kv_heads)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))

    def forward(self, x, k_past, v_past, cos, sin, mask=None):
        attn, k, v = self.self_attn(self.input_layernorm(x), k_past, v_past, cos, sin, mask)
        h = x + attn
        return h + self.mlp(self.post_attention_layernorm(h)), k, v


class Llama3Decode(Llama3Layer):
    def forward(self, x, k_cache, v_cache, cos, sin):
        return super().forward(x, k_cache, v_cache, cos, sin)


class Llama3Prefill(Llama3Layer):
    def forward(self, x, cos, sin, mask):
        return super().forward(x, None, None, cos, sin, mask)


def _rotary(positions: torch.Tensor, head_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    inv = _angles(1, head_dim, base=500000.0)  # Llama 3's rope theta
    angles = (positions[:, None].float() * inv[None, :]).repeat(1, 2)  # [t, head_dim]
    return angles.cos()[None, None], angles.sin()[None, None]


def llama3_8b(hidden: int = 4096, heads: int = 32, kv_heads: int = 8, ffn: int = 14336,
              batch: int = 16, kv_len: int = 1020, layers: int = 32) -> Recipe:
    """One decode step: ``batch`` new tokens, each attending to ``kv_len`` cached positions."""
    layer = _init(Llama3Decode(hidden, heads, kv_heads, ffn))
    head_dim = hidden // heads
    cos, sin = _rotary(torch.tensor([kv_len]), head_dim)
    return Recipe(layer, {
        "x": torch.randn(batch, 1, hidden),
        "k_cache": torch.randn(batch, kv_heads, kv_len, head_dim),
        "v_cache": torch.randn(batch, kv_heads, kv_len, head_dim),
        "cos": cos, "sin": sin}, layers=layers, tokens=batch, carry={"x": 0},
        state={"k_cache": 1, "v_cache": 2})


def llama3_8b_prefill(hidden: int = 4096, heads: int = 32, kv_heads: int = 8,
                      ffn: int = 14336, tokens: int = 1020, layers: int = 32) -> Recipe:
    """One request's prompt of ``tokens`` positions (it yields the first output token)."""
    layer = _init(Llama3Prefill(hidden, heads, kv_heads, ffn))
    cos, sin = _rotary(torch.arange(tokens), hidden // heads)
    mask = torch.full((tokens, tokens), float("-inf")).triu(1)[None, None]
    return Recipe(layer, {"x": torch.randn(1, tokens, hidden), "cos": cos, "sin": sin,
                          "mask": mask}, layers=layers, tokens=1, prompt=tokens,
                  carry={"x": 0})
