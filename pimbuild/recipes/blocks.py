"""Two more of FluidGPU's model architectures, as blocks at static shapes (docs/design.md §10).

``mamba``: one decode step of a Mamba-style selective-state-space block (Gu and Dao, 2023)
for a batch: input projection to ``x`` and gate ``z``, a depthwise causal convolution over the
last ``d_conv`` inputs (its window is state), the input-dependent ``dt``, ``B``, ``C``, the state
update ``h = exp(dt * A) * h + dt * B * x``, ``y = C . h + D * x``, gated by ``silu(z)``, and the
output projection. It returns the block's output and the two new states.

``mmdit``: one MMDiT block (Stable Diffusion 3 style): image and text tokens have their own
adaLN modulation, QKV, output projection and MLP, and attend jointly over both; the conditioning
vector ``c`` (timestep and pooled text) modulates both streams. One denoising step of a request
runs ``layers`` blocks; a request takes ``steps`` denoising steps.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from pimbuild.recipes import Recipe
from pimbuild.recipes.llm import _init
from pimbuild.recipes.operators import RMSNorm


class MambaStep(nn.Module):
    def __init__(self, d_model: int, d_state: int, d_conv: int, expand: int) -> None:
        super().__init__()
        d_inner = expand * d_model
        self.dt_rank = math.ceil(d_model / 16)
        self.norm = RMSNorm(d_model)
        self.in_proj = nn.Linear(d_model, 2 * d_inner, bias=False)
        self.conv_weight = nn.Parameter(torch.randn(d_inner, d_conv))
        self.conv_bias = nn.Parameter(torch.zeros(d_inner))
        self.x_proj = nn.Linear(d_inner, self.dt_rank + 2 * d_state, bias=False)
        self.dt_proj = nn.Linear(self.dt_rank, d_inner)
        self.a_log = nn.Parameter(torch.randn(d_inner, d_state))
        self.d = nn.Parameter(torch.ones(d_inner))
        self.out_proj = nn.Linear(d_inner, d_model, bias=False)
        self.d_state = d_state

    def forward(self, u, conv_state, ssm_state):
        """u [b, d_model]; conv_state [b, d_inner, d_conv]; ssm_state [b, d_inner, d_state]."""
        x, z = self.in_proj(self.norm(u)).chunk(2, dim=-1)
        window = torch.cat((conv_state[:, :, 1:], x[:, :, None]), dim=-1)
        x = F.silu((window * self.conv_weight).sum(-1) + self.conv_bias)
        dt, b, c = self.x_proj(x).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        dt = F.softplus(self.dt_proj(dt))  # [b, d_inner]
        decay = torch.exp(dt[:, :, None] * -torch.exp(self.a_log))  # [b, d_inner, d_state]
        h = decay * ssm_state + (dt * x)[:, :, None] * b[:, None, :]
        y = (h * c[:, None, :]).sum(-1) + self.d * x
        return u + self.out_proj(y * F.silu(z)), window, h


def mamba(d_model: int = 2560, d_state: int = 16, d_conv: int = 4, expand: int = 2,
          batch: int = 16, layers: int = 64) -> Recipe:
    """One decode step of a batch (Mamba-2.8B's width and depth by default)."""
    block = _init(MambaStep(d_model, d_state, d_conv, expand))
    d_inner = expand * d_model
    return Recipe(block, {"u": torch.randn(batch, d_model),
                          "conv_state": torch.randn(batch, d_inner, d_conv),
                          "ssm_state": torch.randn(batch, d_inner, d_state)},
                  layers=layers, tokens=batch, carry={"u": 0},
                  state={"conv_state": 1, "ssm_state": 2})


def _modulate(x, shift, scale):
    return x * (1 + scale[:, None]) + shift[:, None]


class Stream(nn.Module):
    """One modality's weights in an MMDiT block."""

    def __init__(self, hidden: int, heads: int, mlp: int) -> None:
        super().__init__()
        self.heads = heads
        self.ada = nn.Linear(hidden, 6 * hidden)
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False)
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False)
        self.fc1 = nn.Linear(hidden, mlp)
        self.fc2 = nn.Linear(mlp, hidden)

    def pre(self, x, c):
        mods = self.ada(F.silu(c)).chunk(6, dim=-1)
        b, t, hidden = x.shape
        qkv = self.qkv(_modulate(self.norm1(x), mods[0], mods[1]))
        q, k, v = qkv.view(b, t, 3, self.heads, hidden // self.heads).permute(2, 0, 3, 1, 4)
        return q, k, v, mods

    def post(self, x, attn, mods):
        x = x + mods[2][:, None] * self.proj(attn)
        # SD3 uses the tanh approximation of GELU; torch-mlir's lowering of it differs from
        # eager's by 4e-6 of the largest value, 3e-5 after the 6144-wide fc2, past the
        # check's 1e-5. The exact (erf) GELU has the same kernels and passes it.
        h = self.fc2(F.gelu(self.fc1(_modulate(self.norm2(x), mods[3], mods[4]))))
        return x + mods[5][:, None] * h


class MMDiTBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, mlp: int) -> None:
        super().__init__()
        self.image = Stream(hidden, heads, mlp)
        self.text = Stream(hidden, heads, mlp)

    def forward(self, x, ctx, c):
        qi, ki, vi, mi = self.image.pre(x, c)
        qt, kt, vt, mt = self.text.pre(ctx, c)
        q, k, v = (torch.cat(p, dim=2) for p in ((qi, qt), (ki, kt), (vi, vt)))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        out = torch.matmul(torch.softmax(scores, dim=-1), v)
        b, h, t, d = out.shape
        out = out.transpose(1, 2).reshape(b, t, h * d)
        n = x.shape[1]
        return self.image.post(x, out[:, :n], mi), self.text.post(ctx, out[:, n:], mt)


def mmdit(hidden: int = 1536, heads: int = 24, image_tokens: int = 4096,
          text_tokens: int = 154, batch: int = 1, layers: int = 24, steps: int = 28
          ) -> Recipe:
    """One block of one denoising step (SD3-medium's width: 1536, 24 heads, 24 blocks; a
    1024x1024 image is 4096 latent patches; 154 text tokens; 28 steps)."""
    block = _init(MMDiTBlock(hidden, heads, 4 * hidden))
    return Recipe(block, {"x": torch.randn(batch, image_tokens, hidden),
                          "ctx": torch.randn(batch, text_tokens, hidden),
                          "c": torch.randn(batch, hidden)},
                  layers=layers, tokens=batch, unit="requests", forwards_per_request=steps,
                  carry={"x": 0, "ctx": 1})
