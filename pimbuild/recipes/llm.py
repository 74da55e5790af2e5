"""Decoder layers of LLaMA-7B and GPT-J-6B for one decode step (paper Table 3, real-world).

Batch 1, one new token, a KV cache of ``kv_len`` past positions passed as inputs, the rotary
angles of the new position passed as inputs; random weights from the caller's seed. Each
forward returns the layer's output and the new token's key and value (what a decode loop
appends to its cache).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from pimbuild.recipes import Recipe
from pimbuild.recipes.operators import RMSNorm


def _init(module: nn.Module) -> nn.Module:
    """Small random weights (default inits are slow on 200M parameters)."""
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, 0.02)
    return module


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _rotate_every_two(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


def _angles(position: int, dim: int, base: float = 10000.0) -> torch.Tensor:
    inv = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    return position * inv  # [dim / 2]


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """q [1, h, 1, d], k/v [1, h, kv, d] -> [1, h, 1, d]."""
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    return torch.matmul(torch.softmax(scores, dim=-1), v)


class LlamaAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def _split(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(1, 1, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, k_cache, v_cache, cos, sin):
        q, k, v = (self._split(p(x)) for p in (self.q_proj, self.k_proj, self.v_proj))
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        out = _attend(q, torch.cat((k_cache, k), dim=2), torch.cat((v_cache, v), dim=2))
        return self.o_proj(out.transpose(1, 2).reshape(1, 1, -1)), k, v


class LlamaMLP(nn.Module):
    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(hidden)
        self.self_attn = LlamaAttention(hidden, heads)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.mlp = LlamaMLP(hidden, ffn)

    def forward(self, x, k_cache, v_cache, cos, sin):
        attn, k, v = self.self_attn(self.input_layernorm(x), k_cache, v_cache, cos, sin)
        h = x + attn
        return h + self.mlp(self.post_attention_layernorm(h)), k, v


def llama7b(hidden: int = 4096, heads: int = 32, ffn: int = 11008, kv_len: int = 128
            ) -> Recipe:
    layer = _init(LlamaLayer(hidden, heads, ffn))
    head_dim = hidden // heads
    theta = _angles(kv_len, head_dim).repeat(2)  # HF LLaMA layout: [cos(a), cos(a)]
    return Recipe(layer, {
        "x": torch.randn(1, 1, hidden),
        "k_cache": torch.randn(1, heads, kv_len, head_dim),
        "v_cache": torch.randn(1, heads, kv_len, head_dim),
        "cos": theta.cos().view(1, 1, 1, head_dim), "sin": theta.sin().view(1, 1, 1, head_dim)},
        layers=32, carry={"x": 0}, state={"k_cache": 1, "v_cache": 2})  # 32 layers


class GptjAttention(nn.Module):
    def __init__(self, hidden: int, heads: int, rotary_dim: int) -> None:
        super().__init__()
        self.heads, self.head_dim, self.rotary_dim = heads, hidden // heads, rotary_dim
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.out_proj = nn.Linear(hidden, hidden, bias=False)

    def _rotary(self, x, cos, sin):
        rot, rest = x[..., :self.rotary_dim], x[..., self.rotary_dim:]
        return torch.cat((rot * cos + _rotate_every_two(rot) * sin, rest), dim=-1)

    def forward(self, x, k_cache, v_cache, cos, sin):
        q, k, v = (p(x).view(1, 1, self.heads, self.head_dim).transpose(1, 2)
                   for p in (self.q_proj, self.k_proj, self.v_proj))
        q, k = self._rotary(q, cos, sin), self._rotary(k, cos, sin)
        out = _attend(q, torch.cat((k_cache, k), dim=2), torch.cat((v_cache, v), dim=2))
        return self.out_proj(out.transpose(1, 2).reshape(1, 1, -1)), k, v


class GptjMLP(nn.Module):
    def __init__(self, hidden: int, ffn: int) -> None:
        super().__init__()
        self.fc_in = nn.Linear(hidden, ffn)
        self.fc_out = nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(F.gelu(self.fc_in(x), approximate="tanh"))


class GptjLayer(nn.Module):
    """GPT-J block: one LayerNorm, attention and MLP in parallel on its output."""

    def __init__(self, hidden: int, heads: int, ffn: int, rotary_dim: int) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = GptjAttention(hidden, heads, rotary_dim)
        self.mlp = GptjMLP(hidden, ffn)

    def forward(self, x, k_cache, v_cache, cos, sin):
        h = self.ln_1(x)
        attn, k, v = self.attn(h, k_cache, v_cache, cos, sin)
        return x + attn + self.mlp(h), k, v


def gptj6b(hidden: int = 4096, heads: int = 16, ffn: int = 16384, rotary_dim: int = 64,
           kv_len: int = 128) -> Recipe:
    layer = _init(GptjLayer(hidden, heads, ffn, rotary_dim))
    head_dim = hidden // heads
    theta = _angles(kv_len, rotary_dim).repeat_interleave(2)  # GPT-J: interleaved pairs
    return Recipe(layer, {
        "x": torch.randn(1, 1, hidden),
        "k_cache": torch.randn(1, heads, kv_len, head_dim),
        "v_cache": torch.randn(1, heads, kv_len, head_dim),
        "cos": theta.cos().view(1, 1, 1, rotary_dim),
        "sin": theta.sin().view(1, 1, 1, rotary_dim)}, layers=28,  # GPT-J-6B has 28
        carry={"x": 0}, state={"k_cache": 1, "v_cache": 2})
