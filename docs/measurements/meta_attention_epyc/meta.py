"""Meta's llama/model.py Attention (complex rotary, no KV cache) as pimbuild recipes."""

from __future__ import annotations

import math

import torch
from torch import nn

from pimbuild.recipes import Recipe


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0) -> torch.Tensor:
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    shape = [d if i == 1 or i == xq_.ndim - 1 else 1 for i, d in enumerate(xq_.shape)]
    freqs_cis = freqs_cis.view(*shape)
    xq_out = torch.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = torch.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


class Attention(nn.Module):
    def __init__(self, dim: int, n_heads: int, seq: int) -> None:
        super().__init__()
        self.n_heads, self.head_dim = n_heads, dim // n_heads
        self.wq = nn.Linear(dim, dim, bias=False)
        self.wk = nn.Linear(dim, dim, bias=False)
        self.wv = nn.Linear(dim, dim, bias=False)
        self.wo = nn.Linear(dim, dim, bias=False)
        self.register_buffer("freqs_cis", precompute_freqs_cis(self.head_dim, seq * 2),
                             persistent=False)

    def forward(self, x):
        bsz, seqlen, _ = x.shape
        freqs_cis = self.freqs_cis[0:seqlen]
        xq = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xk = self.wk(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xv = self.wv(x).view(bsz, seqlen, self.n_heads, self.head_dim)
        xq, xk = apply_rotary_emb(xq, xk, freqs_cis=freqs_cis)
        xq, xk, xv = xq.transpose(1, 2), xk.transpose(1, 2), xv.transpose(1, 2)
        scores = torch.matmul(xq, xk.transpose(2, 3)) / math.sqrt(self.head_dim)
        mask = torch.full((seqlen, seqlen), float("-inf")).triu(1)
        scores = torch.softmax(scores + mask, dim=-1)
        out = torch.matmul(scores, xv).transpose(1, 2).reshape(bsz, seqlen, -1)
        return self.wo(out)


def attention_7b(**_) -> Recipe:
    """LLaMA-7B width, a 128-token prefill (model=relu's size is ignored)."""
    return Recipe(Attention(4096, 32, 128), {"x": torch.randn(1, 128, 4096)})


def linear_128(**_) -> Recipe:
    """One of its projections alone."""
    return Recipe(nn.Linear(4096, 4096, bias=False), {"x": torch.randn(1, 128, 4096)})
