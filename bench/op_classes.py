"""Small models by class, none of them written for pimbuild: layers, op families, dtypes,
input and output kinds a user's model may hold, and small architectures (a U-Net block, an
MLP-Mixer, a mixture of experts, a graph network, Swin, ConvNeXt, MBConv, RWKV), through both
targets (not a test; about 45 minutes).

    .venv/bin/python bench/op_classes.py [--only gru,fft] [--no-gpus]

Each model is built with ``model.recipe=op_classes:<name>`` (this directory on PYTHONPATH)
through the PIM pipeline and through ``system=gpus devices=[a100,l40s]``. A row is the exit
status and the check against eager, or the one ``error:`` line; the models in ``REFUSED``
must be refused by class at ``lower`` (an FFT, control flow on values, an input
written in place, an output that is not a tensor or is returned twice, random draws, int8
arithmetic torch-mlir crashes on, a result shape that depends on values, an op with
side effects), every other one must build and match eager. Writes
outputs/bench/op_classes.md and exits 1 when a row is not what it should be. The cases that
found bugs are also tests (tests/odd_recipes.py, tests/bad_recipes.py).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import namedtuple
from pathlib import Path

import torch
import torch.nn.functional as F
from hf_models import GPUS, build
from torch import nn

from pimbuild.recipes import Recipe


class _Fn(nn.Module):
    def __init__(self, f) -> None:
        super().__init__()
        self.f = f

    def forward(self, *args):
        return self.f(*args)


def _r(f, **inputs: torch.Tensor) -> Recipe:
    torch.manual_seed(0)
    return Recipe(f if isinstance(f, nn.Module) else _Fn(f), inputs)


class _Gru(nn.Module):
    def __init__(self, n: int, steps: int) -> None:
        super().__init__()
        self.cell, self.steps = nn.GRUCell(n, n), steps

    def forward(self, x):
        h = torch.zeros(1, x.shape[-1])
        for t in range(self.steps):
            h = self.cell(x[:, t], h)
        return h


def _meta_rotary(x, angles):
    """Meta's llama ``apply_rotary_emb``: feature pairs as complex numbers, rotated by a
    complex64 tensor from ``torch.polar``."""
    freqs_cis = torch.polar(torch.ones_like(angles), angles)
    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    freqs_cis = freqs_cis.view(1, x_.shape[1], 1, x_.shape[-1])
    return torch.view_as_real(x_ * freqs_cis).flatten(3).type_as(x)


def _branch(x):
    return x * 2 if x.sum() > 0 else x - 1


def _chain(x):
    for i in range(150):
        x = torch.tanh(x * 1.01 + 0.01 * i)
    return x


Pair = namedtuple("Pair", "a b")


class _Buf(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.register_buffer("scale", torch.linspace(0.5, 1.5, n))
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        return self.lin(x) * self.scale


def _inplace(x):
    x.add_(1)
    return x * 2


def _index_put(x, i):
    y = x.clone()
    y[i] = 0.0
    return y


class _ParamOut(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.w = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return x + 1, self.w


def _twice(x):
    y = x + 1
    return y, y


# Small architectures of kinds this project has no recipe for (2026-12-02).


class UNetBlock(nn.Module):
    def __init__(self, c=8):
        super().__init__()
        self.down = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1)
        self.mid = nn.Conv2d(2 * c, 2 * c, 3, padding=1)
        self.up = nn.ConvTranspose2d(2 * c, c, 2, stride=2)
        self.out = nn.Conv2d(2 * c, c, 1)

    def forward(self, x):
        h = F.silu(self.down(x))
        h = F.silu(self.mid(h))
        return self.out(torch.cat([self.up(h), x], 1))


class Mixer(nn.Module):
    def __init__(self, tokens=16, ch=32):
        super().__init__()
        self.n1, self.n2 = nn.LayerNorm(ch), nn.LayerNorm(ch)
        self.tok = nn.Sequential(nn.Linear(tokens, 2 * tokens), nn.GELU(),
                                 nn.Linear(2 * tokens, tokens))
        self.chn = nn.Sequential(nn.Linear(ch, 2 * ch), nn.GELU(), nn.Linear(2 * ch, ch))

    def forward(self, x):
        x = x + self.tok(self.n1(x).transpose(1, 2)).transpose(1, 2)
        return x + self.chn(self.n2(x))


class MoE(nn.Module):
    def __init__(self, d=32, e=4, k=2):
        super().__init__()
        self.gate = nn.Linear(d, e)
        self.w1 = nn.Parameter(torch.randn(e, d, 2 * d) * 0.1)
        self.w2 = nn.Parameter(torch.randn(e, 2 * d, d) * 0.1)
        self.k = k

    def forward(self, x):  # dense dispatch: every expert on every token, weighted by top-k
        logits = self.gate(x)
        vals, idx = logits.topk(self.k, -1)
        weights = torch.zeros_like(logits).scatter(-1, idx, F.softmax(vals, -1))
        h = torch.einsum("td,edf->etf", x, self.w1)
        y = torch.einsum("etf,efd->etd", F.silu(h), self.w2)
        return torch.einsum("te,etd->td", weights, y)


class GNN(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x, src, dst):
        msg = self.lin(x)[src]
        agg = torch.zeros_like(x).index_add(0, dst, msg)
        deg = torch.zeros(x.shape[0]).index_add(0, dst, torch.ones(dst.shape[0])).clamp(min=1)
        return F.relu(agg / deg[:, None] + x)


class CrossAttn(nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.q, self.kv, self.o = nn.Linear(d, d), nn.Linear(d, 2 * d), nn.Linear(d, d)

    def forward(self, x, mem):
        q = self.q(x).view(1, -1, 4, 8).transpose(1, 2)
        k, v = self.kv(mem).view(1, -1, 2, 4, 8).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        return self.o(a.transpose(1, 2).reshape(1, -1, 32))


def _t5_factory(q_len=16, k_len=16, buckets=8, max_dist=32):
    table = nn.Embedding(buckets, 4)

    def f(x):
        ctx = torch.arange(q_len)[:, None]
        mem = torch.arange(k_len)[None, :]
        rel = (mem - ctx).abs()
        exact = buckets // 2
        large = exact + (torch.log(rel.float().clamp(min=1) / exact) / math.log(max_dist / exact)
                         * (buckets - exact)).to(torch.long)
        large = torch.minimum(large, torch.full_like(large, buckets - 1))
        b = torch.where(rel < exact, rel, large)
        return torch.softmax(x + table(b).permute(2, 0, 1), -1)
    m = nn.Module()
    m.table = table
    m.forward = f
    return m


class _T5(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = _t5_factory()
        self.table = self.inner.table

    def forward(self, x):
        return self.inner.forward(x)


class SwinWindow(nn.Module):
    def __init__(self, c=16, w=4):
        super().__init__()
        self.w = w
        self.attn = nn.MultiheadAttention(c, 2, batch_first=True)

    def forward(self, x):  # (B, H, W, C)
        B, H, W, C = x.shape
        x = torch.roll(x, (-2, -2), (1, 2))
        win = x.view(B, H // self.w, self.w, W // self.w, self.w, C).permute(0, 1, 3, 2, 4, 5)
        win = win.reshape(-1, self.w * self.w, C)
        y, _ = self.attn(win, win, win, need_weights=False)
        y = y.view(B, H // self.w, W // self.w, self.w, self.w, C).permute(0, 1, 3, 2, 4, 5)
        return torch.roll(y.reshape(B, H, W, C), (2, 2), (1, 2))


class ConvNeXt(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = nn.LayerNorm(c)
        self.pw1, self.pw2 = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 0.1))

    def forward(self, x):
        h = self.dw(x).permute(0, 2, 3, 1)
        h = self.pw2(F.gelu(self.pw1(self.norm(h)))) * self.gamma
        return x + h.permute(0, 3, 1, 2)


class MBConv(nn.Module):
    def __init__(self, c=16):
        super().__init__()
        self.exp = nn.Conv2d(c, 4 * c, 1)
        self.bn1 = nn.BatchNorm2d(4 * c)
        self.dw = nn.Conv2d(4 * c, 4 * c, 3, padding=1, groups=4 * c)
        self.se1, self.se2 = nn.Conv2d(4 * c, c // 4, 1), nn.Conv2d(c // 4, 4 * c, 1)
        self.proj = nn.Conv2d(4 * c, c, 1)

    def forward(self, x):
        h = F.silu(self.bn1(self.exp(x)))
        h = F.silu(self.dw(h))
        s = torch.sigmoid(self.se2(F.silu(self.se1(F.adaptive_avg_pool2d(h, 1)))))
        return x + self.proj(h * s)


class RWKVTimeMix(nn.Module):
    def __init__(self, d=16, t=8):
        super().__init__()
        self.k, self.v, self.r = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.decay = nn.Parameter(-torch.rand(d))
        self.t = t

    def forward(self, x):  # (T, d), the recurrent form unrolled
        k, v, r = self.k(x), self.v(x), torch.sigmoid(self.r(x))
        w = torch.exp(self.decay)
        num = torch.zeros(x.shape[1])
        den = torch.zeros(x.shape[1])
        outs = []
        for i in range(self.t):
            ek = torch.exp(k[i])
            num = w * num + ek * v[i]
            den = w * den + ek
            outs.append(r[i] * num / den)
        return torch.stack(outs)


class _DictOut(nn.Module):
    def forward(self, x):
        return {"a": x + 1, "b": x * 2}


class _WeightNorm(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.lin = nn.utils.parametrizations.weight_norm(nn.Linear(n, n))

    def forward(self, x):
        return self.lin(x)


class _CausalDecoder(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(n, 4, 2 * n, dropout=0.0, batch_first=True)

    def forward(self, x, memory):
        mask = nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.layer(x, memory, tgt_mask=mask, tgt_is_causal=True)


class _PatchEmbed(nn.Module):
    """ViT's stem: strided conv, a class token concatenated, position embedding, LayerNorm."""

    def __init__(self, d: int = 32) -> None:
        super().__init__()
        self.proj, self.norm = nn.Conv2d(3, d, 4, stride=4), nn.LayerNorm(d)
        self.cls = nn.Parameter(torch.randn(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, 17, d))

    def forward(self, x):
        p = self.proj(x).flatten(2).transpose(1, 2)
        return self.norm(torch.cat([self.cls.expand(x.shape[0], -1, -1), p], 1) + self.pos)


def _alibi(q, k, v):
    """ALiBi: per-head linear distance bias, causal mask by masked_fill."""
    n = q.shape[-2]
    slopes = 2.0 ** (-torch.arange(1, q.shape[1] + 1, dtype=torch.float32))
    bias = -(torch.arange(n)[None, :] - torch.arange(n)[:, None]).abs().float()
    mask = torch.ones(n, n, dtype=torch.bool).tril()
    s = q @ k.transpose(-1, -2) / 4 + slopes[:, None, None] * bias
    return torch.softmax(s.masked_fill(~mask, float("-inf")), -1) @ v


def _log_scan(a, b):
    """A linear recurrence h_t = a_t h_(t-1) + b_t as cumulative sums in log space."""
    la = torch.cumsum(torch.log(a), 1)
    return torch.exp(la) * torch.cumsum(b * torch.exp(-la), 1)


BUILDERS = {
    "embedding": lambda n: _r(nn.Sequential(nn.Embedding(100, n), nn.Linear(n, n)),
                              ids=torch.randint(0, 100, (4, 8))),
    "gru": lambda n: _r(nn.GRU(n, n, batch_first=True), x=torch.randn(1, 4, n)),
    "gru_cell_loop": lambda n: _r(_Gru(n, 20), x=torch.randn(1, 20, n)),
    "mha": lambda n: _r(nn.MultiheadAttention(n, 4, batch_first=True).eval(),
                        q=torch.randn(2, 10, n), k=torch.randn(2, 10, n),
                        v=torch.randn(2, 10, n)),
    "encoder_layer": lambda n: _r(nn.TransformerEncoderLayer(n, 4, 2 * n, batch_first=True),
                                  x=torch.randn(1, 8, n)),
    "conv_bn_pool": lambda n: _r(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1),
                                               nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2)),
                                 x=torch.randn(1, 3, n, n)),
    "conv_transpose": lambda n: _r(nn.ConvTranspose2d(4, 4, 3, stride=2),
                                   x=torch.randn(1, 4, n, n)),
    "depthwise_conv1d": lambda n: _r(nn.Conv1d(16, 16, 5, groups=16, padding=2),
                                     x=torch.randn(2, 16, n)),
    "batchnorm_train": lambda n: _r(nn.Sequential(nn.Linear(n, n), nn.BatchNorm1d(n)).train(),
                                    x=torch.randn(8, n)),
    "groupnorm": lambda n: _r(nn.GroupNorm(4, 16), x=torch.randn(2, 16, n, n)),
    "sdpa_causal": lambda n: _r(lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True), q=torch.randn(1, 2, n, 16), k=torch.randn(1, 2, n, 16),
        v=torch.randn(1, 2, n, 16)),
    "pixel_shuffle": lambda n: _r(lambda x: F.interpolate(F.pixel_shuffle(x, 2),
                                                          scale_factor=2, mode="nearest"),
                                  x=torch.randn(1, 8, n, n)),
    "activations": lambda n: _r(lambda x: F.mish(F.softplus(F.hardswish(F.silu(
        x.clamp(-3, 3))))), x=torch.randn(n, n)),
    "chain_150": lambda n: _r(_chain, x=torch.randn(n)),
    "cumsum_sort": lambda n: _r(lambda x: (torch.cumsum(x, 1), torch.sort(x, dim=1).values),
                                x=torch.randn(4, n)),
    "argsort_gather": lambda n: _r(lambda x: torch.gather(x, 1, torch.argsort(x, 1)),
                                   x=torch.randn(4, n)),
    "topk_argmax": lambda n: _r(lambda x: (x.argmax(-1), torch.topk(x, 3).values),
                                x=torch.randn(4, n)),
    "nll_loss": lambda n: _r(lambda x, t: F.nll_loss(F.log_softmax(x, -1), t),
                             x=torch.randn(8, n), t=torch.randint(0, n, (8,))),
    "integer_ops": lambda n: _r(lambda a, b: ((a // 3) % 5 + (a & b), a.float() / 7),
                                a=torch.randint(0, 100, (n,)), b=torch.randint(0, 100, (n,))),
    "bool_mask_input": lambda n: _r(lambda m, x: torch.where(m, x, -x),
                                    m=torch.rand(n) > 0.5, x=torch.randn(n)),
    "float16_input": lambda n: _r(lambda x: x * 2 + 1, x=torch.randn(n).half()),
    "float64_module": lambda n: _r(nn.Linear(n, n).double(), x=torch.randn(2, n).double()),
    "zero_size": lambda n: _r(lambda x: x + 1, x=torch.randn(0, n)),
    "one_element": lambda n: _r(lambda x: torch.exp(x) * 2, x=torch.randn(1)),
    "scalar_output": lambda n: _r(lambda x: (x * x).sum(), x=torch.randn(n, n)),
    "view_outputs": lambda n: _r(lambda x: (torch.relu(x).t(), *torch.relu(x).chunk(2, 1)),
                                 x=torch.randn(8, n)),
    "constant_outputs": lambda n: _r(lambda x: (x + 1, torch.ones(3, 3),
                                                torch.arange(6.0).reshape(2, 3)),
                                     x=torch.randn(n)),
    "unused_input": lambda n: _r(lambda x, y: x * 2, x=torch.randn(n), y=torch.randn(n)),
    "big_constant": lambda n: _r(lambda x: x + torch.arange(1 << 20, dtype=torch.float32),
                                 x=torch.randn(1 << 20)),
    "fft": lambda n: _r(lambda x: torch.fft.rfft(x).abs(), x=torch.randn(4, n)),
    "complex_input": lambda n: _r(lambda x: x.abs(), x=torch.randn(n, dtype=torch.complex64)),
    # complex tensors as pairs of real ones (2026-12-03)
    "meta_rotary": lambda n: _r(_meta_rotary, x=torch.randn(2, n, 4, 32),
                                angles=torch.randn(n, 16)),
    "complex_output": lambda n: _r(lambda x: torch.polar(x.abs(), x) * (1 - 2j),
                                   x=torch.randn(n)),
    "branch_on_values": lambda n: _r(_branch, x=torch.randn(n)),
    # input and output kinds, layer modes, more op families (2026-12-02)
    "inplace_input": lambda n: _r(_inplace, x=torch.randn(n)),
    "namedtuple_output": lambda n: _r(lambda x: Pair(x + 1, x * 2), x=torch.randn(n)),
    "nested_output": lambda n: _r(lambda x: (x + 1, (x * 2, [x - 1])), x=torch.randn(n)),
    "none_output": lambda n: _r(lambda x: (x + 1, None), x=torch.randn(n)),
    "lstm": lambda n: _r(nn.LSTM(n, n, batch_first=True), x=torch.randn(1, 4, n)),
    "einsum": lambda n: _r(lambda a, b: torch.einsum("bij,bjk->bik", a, b),
                           a=torch.randn(2, n, n), b=torch.randn(2, n, n)),
    "maxpool_indices": lambda n: _r(lambda x: F.max_pool2d(x, 2, return_indices=True),
                                    x=torch.randn(1, 2, n, n)),
    "scatter_add": lambda n: _r(lambda x, i: torch.zeros(n).scatter_add(0, i, x),
                                x=torch.randn(n), i=torch.randint(0, n, (n,))),
    "index_put": lambda n: _r(_index_put, x=torch.randn(n, n), i=torch.tensor([1, 3])),
    "masked_fill_softmax": lambda n: _r(
        lambda x: torch.softmax(x.masked_fill(torch.triu(torch.ones(n, n, dtype=torch.bool), 1),
                                              float("-inf")), -1), x=torch.randn(n, n)),
    "uint8_input": lambda n: _r(lambda x: x.float() / 255.0,
                                x=torch.randint(0, 255, (n,), dtype=torch.uint8)),
    "int8_input": lambda n: _r(lambda x: (x * 2).to(torch.int32),
                               x=torch.randint(-100, 100, (n,), dtype=torch.int8)),
    "bool_output": lambda n: _r(lambda x: x > 0, x=torch.randn(n)),
    "registered_buffer": lambda n: _r(_Buf(n), x=torch.randn(2, n)),
    "dropout_train": lambda n: _r(nn.Sequential(nn.Linear(n, n), nn.Dropout(0.5)).train(),
                                  x=torch.randn(2, n)),
    "randn_in_forward": lambda n: _r(lambda x: x + torch.randn(n), x=torch.randn(n)),
    "conv3d": lambda n: _r(nn.Conv3d(2, 4, 3, padding=1), x=torch.randn(1, 2, 4, n, n)),
    "rms_norm": lambda n: _r(lambda x: F.rms_norm(x, (n,)), x=torch.randn(4, n)),
    "rank6_permute": lambda n: _r(lambda x: x.permute(5, 4, 3, 2, 1, 0).contiguous() * 2,
                                  x=torch.randn(2, 3, 2, 3, 2, n)),
    "strided_slice": lambda n: _r(lambda x: x[:, ::2] + x[:, 1::2], x=torch.randn(n, n)),
    "flip_roll": lambda n: _r(lambda x: torch.roll(torch.flip(x, [0]), 3, 1), x=torch.randn(n, n)),
    "stats": lambda n: _r(lambda x: (torch.logsumexp(x, 1), x.var(1), x.std(0)),
                          x=torch.randn(n, n)),
    "pools": lambda n: _r(lambda x: (F.avg_pool1d(x, 2), F.adaptive_avg_pool1d(x, 3)),
                          x=torch.randn(1, 4, n)),
    "prelu_elu": lambda n: _r(nn.Sequential(nn.PReLU(), nn.ELU(), nn.LeakyReLU(0.2)),
                              x=torch.randn(n)),
    "cross_entropy_ls": lambda n: _r(lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1),
                                     x=torch.randn(4, n), t=torch.randint(0, n, (4,))),
    "cdist": lambda n: _r(lambda a, b: torch.cdist(a, b), a=torch.randn(5, n),
                          b=torch.randn(6, n)),
    "bilinear_ac": lambda n: _r(lambda x: F.interpolate(x, scale_factor=2, mode="bilinear",
                                                        align_corners=True),
                                x=torch.randn(1, 2, n, n)),
    "repeat_interleave": lambda n: _r(lambda x: x.repeat_interleave(2, 0) + 1,
                                      x=torch.randn(n)),
    "bucketize": lambda n: _r(lambda x: torch.bucketize(x, torch.linspace(-1, 1, 5)),
                              x=torch.randn(n)),
    "embedding_bag": lambda n: _r(nn.EmbeddingBag(50, n, mode="mean"),
                                  input=torch.randint(0, 50, (3, 4))),
    "grid_sample": lambda n: _r(lambda x, g: F.grid_sample(x, g, align_corners=False),
                                x=torch.randn(1, 2, n, n), g=torch.rand(1, 4, 4, 2) * 2 - 1),
    "int64_matmul": lambda n: _r(lambda a, b: a @ b, a=torch.randint(0, 5, (n, n)),
                                 b=torch.randint(0, 5, (n, n))),
    "clamp_minmax": lambda n: _r(lambda a, b: torch.clamp(torch.minimum(a, b), -0.5, 0.5)
                                 + torch.maximum(a, b),
                                 a=torch.randn(n), b=torch.randn(n)),
    "where_scalar": lambda n: _r(lambda x: torch.where(x > 0, x, 0.0), x=torch.randn(n)),
    "nan_inputs": lambda n: _r(lambda x: torch.nan_to_num(x) + 1,
                               x=torch.tensor([float("nan"), 1.0, float("inf")] * n)),
    "tuple_input_cat": lambda n: _r(lambda a, b: torch.cat([a, b, a], 0).sum(0),
                                    a=torch.randn(2, n), b=torch.randn(3, n)),
    "noncontig_input": lambda n: _r(lambda x: x * 2 + 1, x=torch.randn(n, 2 * n).t()),
    "expanded_input": lambda n: _r(lambda x: x.sum(0) + x, x=torch.randn(1, n).expand(4, n)),
    "channels_last_input": lambda n: _r(nn.Conv2d(3, 4, 3), x=torch.randn(1, 3, n, n).to(
        memory_format=torch.channels_last)),
    "same_output_twice": lambda n: _r(_twice, x=torch.randn(n)),
    "output_is_input": lambda n: _r(lambda x: (x, x * 2), x=torch.randn(n)),
    "output_is_param": lambda n: _r(_ParamOut(n), x=torch.randn(n)),
    "scalar_input": lambda n: _r(lambda x, s: x * s, x=torch.randn(n), s=torch.tensor(3.0)),
    "int_to_float_math": lambda n: _r(lambda a: a * 0.5 + 1, a=torch.randint(0, 9, (n,))),
    "input_view_output": lambda n: _r(lambda x: x[0], x=torch.randn(3, n)),
    # architectures
    "unet_block": lambda n: _r(UNetBlock(), x=torch.randn(1, 8, n, n)),
    "mlp_mixer": lambda n: _r(Mixer(), x=torch.randn(2, 16, 32)),
    "moe_dense": lambda n: _r(MoE(), x=torch.randn(n, 32)),
    "gnn_scatter": lambda n: _r(GNN(), x=torch.randn(n, 16), src=torch.randint(0, n, (3 * n,)),
                                dst=torch.randint(0, n, (3 * n,))),
    "cross_attention": lambda n: _r(CrossAttn(), x=torch.randn(1, n, 32),
                                    mem=torch.randn(1, 24, 32)),
    "t5_bias": lambda n: _r(_T5(), x=torch.randn(4, 16, 16)),
    "swin_window": lambda n: _r(SwinWindow(), x=torch.randn(1, 8, 8, 16)),
    "convnext": lambda n: _r(ConvNeXt(), x=torch.randn(1, 16, n, n)),
    "mbconv": lambda n: _r(MBConv().eval(), x=torch.randn(1, 16, n, n)),
    "rwkv_time_mix": lambda n: _r(RWKVTimeMix(), x=torch.randn(8, 16)),
    # ops torch-mlir lacks or lowers unlike ATen, and outputs CSE makes one (2026-12-03)
    "searchsorted": lambda n: _r(lambda s, v: torch.searchsorted(s, v, right=True),
                                 s=torch.sort(torch.randn(4, n)).values, v=torch.randn(4, 5)),
    "median": lambda n: _r(lambda x: torch.median(x, -1), x=torch.randn(4, n + 1)),
    "erfinv": lambda n: _r(lambda x: torch.erfinv(torch.tanh(x) * 0.99), x=torch.randn(n)),
    "stable_argsort": lambda n: _r(lambda x: torch.argsort(x, stable=True),
                                   x=torch.randint(0, 3, (4, n)).float()),
    "hypot": lambda n: _r(lambda a, b: torch.hypot(a * 1e30, b * 1e30), a=torch.randn(n),
                          b=torch.randn(n)),
    "nan_clamp_argmax": lambda n: _r(lambda x: (x.clamp(-0.5, 0.5), x.argmax(-1)),
                                     x=torch.where(torch.rand(4, n) < 0.2, math.nan,
                                                   torch.randn(4, n))),
    "outputs_alike": lambda n: _r(lambda x: (x * 2, x * 2), x=torch.randn(n)),
    "dlrm_bags": lambda n: _r(nn.EmbeddingBag(100, n, mode="sum"),
                              input=torch.randint(0, 100, (12,)),
                              offsets=torch.tensor([0, 3, 3, 7])),
    # 2026-12-04: a second batch, none of which needed a change
    "bf16_module": lambda n: _r(nn.Linear(n, n).bfloat16(), x=torch.randn(2, n).bfloat16()),
    "float16_module": lambda n: _r(nn.Linear(n, n).half(), x=torch.randn(2, n).half()),
    "dict_output": lambda n: _r(_DictOut(), x=torch.randn(n)),
    "weight_norm": lambda n: _r(_WeightNorm(n), x=torch.randn(2, n)),
    "causal_decoder": lambda n: _r(_CausalDecoder(n).eval(), x=torch.randn(1, 6, n),
                                   memory=torch.randn(1, 5, n)),
    "patch_embed": lambda n: _r(_PatchEmbed(), x=torch.randn(2, 3, n, n)),
    "alibi": lambda n: _r(_alibi, q=torch.randn(1, 4, n, 16), k=torch.randn(1, 4, n, 16),
                          v=torch.randn(1, 4, n, 16)),
    "log_scan": lambda n: _r(_log_scan, a=torch.rand(2, n) * 0.5 + 0.5, b=torch.randn(2, n)),
    "unfold_pads": lambda n: _r(lambda x: (F.unfold(x, 3, padding=1),
                                           F.pad(x, (2, 2, 1, 1), mode="reflect"),
                                           F.pad(x[0], (1, 2), mode="circular")),
                                x=torch.randn(1, 2, n, n)),
    "bicubic": lambda n: _r(lambda x: F.interpolate(x, scale_factor=1.5, mode="bicubic"),
                            x=torch.randn(1, 2, n, n)),
    "scans_quantile": lambda n: _r(lambda x: (torch.cumprod(torch.tril(x), 1),
                                              torch.logcumsumexp(x, 0),
                                              torch.quantile(x, 0.3, dim=1)),
                                   x=torch.rand(n, n)),
    "scatter_amax": lambda n: _r(lambda x, i: torch.zeros(4).scatter_reduce(
        0, i, x, "amax", include_self=False), x=torch.randn(n), i=torch.randint(0, 4, (n,))),
    "bits_and_bools": lambda n: _r(lambda a, x: ((a << 2) ^ (a >> 1), (x > 0).any(1),
                                                 torch.cumsum(x > 0, 0)),
                                   a=torch.randint(0, 100, (n,), dtype=torch.int32),
                                   x=torch.randn(n, 4)),
    "masked_select": lambda n: _r(lambda x: torch.masked_select(x, x > 0), x=torch.randn(n)),
    "linalg_inv": lambda n: _r(lambda x: torch.linalg.inv(x + 4 * torch.eye(4)),
                               x=torch.randn(4, 4)),
}
REFUSED = {"fft": "aten.fft_rfft.default has no rule for complex tensors",
           "branch_on_values": "control flow depends on a tensor's values",
           "inplace_input": "writes its input 'x' in place",
           "none_output": "output 1 of the forward is a NoneType",
           "same_output_twice": "the same tensor as an earlier output",
           "randn_in_forward": "draws random numbers",
           "int8_input": "crashed (SIG",
           "masked_select": "depends on the values of its input",
           "linalg_inv": "an op with side effects"}  # torch-mlir's conversion, in a child process
N = 16  # model.size.n of every build


def _make(name: str):
    def builder(n: int = N) -> Recipe:
        return BUILDERS[name](n)
    builder.__name__ = name
    return builder


globals().update({name: _make(name) for name in BUILDERS})  # op_classes:<name> recipes


def verdict(row: dict) -> str:
    text = " ".join(row["lines"])
    if row["model"] in REFUSED:
        return "refused, as it should be" if row["rc"] == 1 and REFUSED[row["model"]] in text \
            else "NOT REFUSED AS EXPECTED"
    return "built, matches eager" if row["rc"] == 0 and "matches eager" in text else "FAILED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--no-gpus", action="store_true", help="only the PIM target")
    parser.add_argument("--store", type=Path, default=Path("outputs/artifacts"))
    parser.add_argument("--out", type=Path, default=Path("outputs/bench"))
    args = parser.parse_args()
    names = [m for m in args.only.split(",") if m] or list(BUILDERS)
    unknown = [m for m in names if m not in BUILDERS]
    if unknown:
        sys.exit(f"error: no model {', '.join(unknown)}: choose from {', '.join(BUILDERS)}")
    rows = []
    for name in names:
        for extra in [[]] + ([] if args.no_gpus else [GPUS]):
            tag = "gpus" if extra else "pim"
            row = build(name, N, extra, args.store.resolve(),
                        (args.out / "op_class_runs" / f"{name}-{tag}").resolve(), "op_classes")
            rows.append(row | {"verdict": verdict(row)})
            print(f"{name} ({tag}): rc {row['rc']}, {row['seconds']:.0f} s, "
                  f"{rows[-1]['verdict']}", flush=True)
    lines = ["# bench/op_classes.py", "", f"torch {torch.__version__}.", "",
             "| model | target | verdict | rc | s | check or error |",
             "|---|---|---|---:|---:|---|"]
    for r in rows:
        said = next((x for x in r["lines"]
                     if x.startswith(("error:", "partitioned", "agree"))), "")
        lines.append(f"| {r['model']} | {r['target']} | {r['verdict']} | {r['rc']} | "
                     f"{r['seconds']:.0f} | {said.replace('|', '/')} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "op_classes.md").write_text("\n".join(lines) + "\n")
    bad = [r for r in rows if r["verdict"] in ("FAILED", "NOT REFUSED AS EXPECTED")]
    print(f"{len(rows) - len(bad)}/{len(rows)} as expected; table: {args.out / 'op_classes.md'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
