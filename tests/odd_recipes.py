"""Recipes of unusual shapes that must go through every stage (used by tests/test_check.py)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pimbuild.recipes import Recipe
from tests.bad_recipes import _Fn


def mixed_dtypes(n: int = 64) -> Recipe:
    """Outputs of several dtypes: float64, int32, int64 and bool."""
    return Recipe(_Fn(lambda x: (x.double() * 2, (x * 4).to(torch.int32), (x * 4).long(),
                                 x > 0)), {"x": torch.randn(n)})


class _Scaled(nn.Module):
    """A plain tensor attribute: torch.export lifts it as a constant argument."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.scale = torch.linspace(0.5, 1.5, n)

    def forward(self, x):
        return x * self.scale


def tensor_constant(n: int = 64) -> Recipe:
    return Recipe(_Scaled(n), {"x": torch.randn(n)})


def empty_output(n: int = 8) -> Recipe:
    """One output has no elements."""
    return Recipe(_Fn(lambda x: (torch.relu(x), x[:0] * 2)), {"x": torch.randn(n)})


def with_nan(n: int = 8) -> Recipe:
    """NaN and infinities in the output (log of negative numbers and of zero)."""
    x = torch.linspace(-1.0, 1.0, n)
    return Recipe(_Fn(torch.log), {"x": x})


def only_empty(n: int = 8) -> Recipe:
    """The only output has no elements: no nest does any work."""
    return Recipe(_Fn(lambda x: x[:0] * 2), {"x": torch.randn(n)})


def running_sum(n: int = 64) -> Recipe:
    """cumsum: torch-mlir lowers it to a TMTensor scan, not to linalg."""
    return Recipe(_Fn(lambda x: torch.cumsum(x, 0) * 2), {"x": torch.randn(n)})


def scatter_rows(n: int = 64) -> Recipe:
    """index_put: a TMTensor scatter."""
    def fn(x, idx):
        y = x.clone()
        y[idx] = x[idx] * 3
        return y
    return Recipe(_Fn(fn), {"x": torch.randn(n), "idx": torch.tensor([1, 5, 9])})


def sorted_values(n: int = 64) -> Recipe:
    """sort: a TMTensor sort with two outputs."""
    return Recipe(_Fn(lambda x: torch.sort(x)), {"x": torch.randn(n)})


def output_slices(n: int = 64) -> Recipe:
    """Results that are slices (views) of one computed tensor."""
    return Recipe(_Fn(lambda x: tuple((x * 2).view(4, -1).unbind(0)[1:3])), {"x": torch.randn(n)})


class _Cache(nn.Module):
    """A decode step with its KV cache as a module buffer it updates in place: torch.export
    turns the write into a result that replaces the buffer (a cross-iteration dependency the
    recipe does not declare)."""

    def __init__(self, n: int, slots: int) -> None:
        super().__init__()
        self.proj = nn.Linear(n, n)
        self.register_buffer("cache", torch.randn(1, slots, n))

    def forward(self, x, pos):
        k = self.proj(x)
        self.cache.index_copy_(1, pos, k)
        return torch.softmax(self.cache.sum(-1), -1) + x.mean()


def cached_step(n: int = 16, slots: int = 8) -> Recipe:
    return Recipe(_Cache(n, slots), {"x": torch.randn(1, 1, n), "pos": torch.tensor([3])})


def nested_outputs(n: int = 64) -> Recipe:
    """Results as a dict holding a list and a 0-d tensor (torch.export flattens them)."""
    return Recipe(_Fn(lambda x: {"y": torch.relu(x), "parts": [x * 2, (x - 1).sum()]}),
                  {"x": torch.randn(n)})


def scalar_outputs(n: int = 64) -> Recipe:
    """Python scalars beside a tensor, one nested: an int and a bool from the shapes, a float
    constant (torch-mlir lowers them; both sides return them as 0-d tensors)."""
    return Recipe(_Fn(lambda x: (torch.relu(x) * 2, x.shape[0] * 3,
                                 {"scale": 0.5, "square": x.shape[0] == x.numel()})),
                  {"x": torch.randn(n)})


def only_a_scalar(n: int = 64) -> Recipe:
    """The forward returns a Python int and nothing else: no nest, no kernel."""
    return Recipe(_Fn(lambda x: x.shape[0] * 2 + 1), {"x": torch.randn(n)})


def triangular_det(n: int = 8) -> Recipe:
    """Determinants of a batch of matrices: torch-mlir's LU elimination runs nests whose
    bounds are ``n - 1 - i`` of the loop around them (triangular loops)."""
    return Recipe(_Fn(lambda a: torch.linalg.det(a) + 1.0), {"a": torch.randn(4, n, n)})


def everything_offloaded(ctx):
    """A policy: every nest on the device (tests the partition of every kind of nest)."""
    from pimbuild.targets.offload.policies import Decision, Placement

    return Placement({}, [Decision(n.id, ctx.target.device, "all", "every nest offloaded")
                          for n in ctx.nests])


def tensor_literal(n: int = 64) -> Recipe:
    """A tensor built from a literal inside forward: torch.export lifts it as an argument no
    module attribute holds."""
    return Recipe(_Fn(lambda x: torch.index_select(x, 0, torch.tensor([0, 3, 5])) * 2),
                  {"x": torch.randn(n, 4)})


def constant_result(n: int = 64) -> Recipe:
    """A result that depends on no input: the lowered function returns a tensor constant."""
    return Recipe(_Fn(lambda x: (x + 1, torch.ones(3, 3))), {"x": torch.randn(n)})


def returns_input(n: int = 64) -> Recipe:
    """The forward returns its input: no nest, no kernel."""
    return Recipe(_Fn(lambda x: x), {"x": torch.randn(n)})


def training_mode(n: int = 16) -> Recipe:
    """A model left in training mode (as ``nn.Module`` starts): dropout draws and batch norm
    normalises by the batch's statistics until ``eval()``."""
    return Recipe(nn.Sequential(nn.Linear(n, n), nn.BatchNorm1d(n), nn.Dropout(0.5)).train(),
                  {"x": torch.randn(4, n)})


class _Bfloat16Inside(nn.Module):
    """A float32 model that computes in bfloat16: a linear under autocast, a tanh and a
    softmax of a bfloat16 tensor, and a float64 -> bfloat16 conversion."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.lin = nn.Linear(n, n)

    def forward(self, x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.lin(x)
        return ((y * 3).tanh().softmax(-1) + (x.double() * 3).to(torch.bfloat16)).float()


def bfloat16_inside(n: int = 64) -> Recipe:
    return Recipe(_Bfloat16Inside(n), {"x": torch.randn(4, n)})


class _GeluTanhMlp(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(n, 4 * n), nn.Linear(4 * n, n)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x), approximate="tanh"))


def gelu_tanh_mlp(n: int = 64) -> Recipe:
    """GPT-2's MLP: torch-mlir's own GELU-tanh lowering is 8e-5 from eager here."""
    return Recipe(_GeluTanhMlp(n), {"x": torch.randn(8, n)})


def reciprocal_of_zero(n: int = 64) -> Recipe:
    """1/x with zeros in x: eager gives inf; torch-mlir's lowering asserts at run time that
    no element is zero (an abort, unless pimbuild drops the assertion)."""
    x = torch.randn(n)
    x[::4] = 0.0
    return Recipe(_Fn(lambda x: torch.reciprocal(x) + 1), {"x": x})


def topk_router(n: int = 64) -> Recipe:
    """A mixture of experts' router: the top 2 of 4 experts' softmax weights scattered back
    along the last dim (``scatter(-1, ...)``, on which torch-mlir's TorchToLinalg crashes
    unless the frontend counts the dim from the front), then the experts, dense."""
    torch.manual_seed(0)
    gate, experts = nn.Linear(16, 4), torch.randn(4, 16, 16) * 0.1

    def route(x):
        values, index = gate(x).topk(2, -1)
        weights = torch.zeros(x.shape[0], 4).scatter(-1, index, values.softmax(-1))
        return torch.einsum("te,etd->td", weights, torch.einsum("td,edf->etf", x, experts))
    module = _Fn(route)
    module.gate = gate
    return Recipe(module, {"x": torch.randn(n, 16)})


def uint8_arithmetic(n: int = 64) -> Recipe:
    """uint8 ops torch-mlir lowers (wrapping add, unsigned compare, max, shift): the module
    is lowered in a child process first, then as usual."""
    x = torch.arange(n, dtype=torch.uint8) * 4
    return Recipe(_Fn(lambda x: (x + 200, x > 100, x.max(0).values, x >> 2)), {"x": x})


class _HalfPrecisionParts(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.fc = nn.Linear(n, n).to(torch.bfloat16)
        self.scale = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return self.fc(x.to(self.fc.weight.dtype)).float() * self.scale


def half_precision_parts(n: int = 16) -> Recipe:
    """bfloat16 weights and a float16 input in a float32 model: built in float32, and said."""
    return Recipe(_HalfPrecisionParts(n), {"x": torch.randn(4, n).half()})


def rotate_half(n: int = 64) -> Recipe:
    """A rotary embedding's rotate_half: each half of ``x`` is read through a view."""
    return Recipe(_Fn(lambda x: torch.cat([-x[..., n // 2:], x[..., :n // 2]], -1) * 2),
                  {"x": torch.randn(4, n)})


class _Norms(nn.Module):
    """Each of ``norms`` applied to the input (after ``cast``), their results as a tuple."""

    def __init__(self, *norms: nn.Module, cast: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.norms, self.cast = nn.ModuleList(norms), cast

    def forward(self, x):
        return tuple(norm(x.to(self.cast)).float() for norm in self.norms)


def offset_layer_norm(n: int = 64) -> Recipe:
    """A LayerNorm of rows whose mean is 10 times their spread (float32 moments keep it to
    eager's accuracy), and one without weight and bias over the last two dimensions."""
    return Recipe(_Norms(nn.LayerNorm(n), nn.LayerNorm([4, n], elementwise_affine=False)),
                  {"x": torch.randn(3, 4, n) + 10})


def group_norm(n: int = 64) -> Recipe:
    """GroupNorm over 4 groups of a 16-channel image, with and without its affine part."""
    return Recipe(_Norms(nn.GroupNorm(4, 16), nn.GroupNorm(4, 16, affine=False)),
                  {"x": torch.randn(2, 16, n // 8, 8)})


def bfloat16_layer_norm(n: int = 64) -> Recipe:
    """A bfloat16 LayerNorm (its moments computed in float32) in a float32 model."""
    return Recipe(_Norms(nn.LayerNorm(n).to(torch.bfloat16), cast=torch.bfloat16),
                  {"x": torch.randn(8, n)})


def long_sums(n: int = 64) -> Recipe:
    """Sums of 2^18 terms near 1000: down the columns (one running sum per column before),
    a global average over a 512 x 512 image (both dimensions in one reduction), and the
    mean of all of it (``aten.mean.default``)."""
    return Recipe(_Fn(lambda x, img: (x.sum(0), img.mean((-2, -1)), img.mean())),
                  {"x": torch.rand(1 << 18, 4) + 1000,
                   "img": torch.rand(1, 2, 512, 512) + 1000})


def long_scans(n: int = 64) -> Recipe:
    """A cumulative sum of 2^20 values in [0, 1) and a cumulative product of 2^14 near 1."""
    return Recipe(_Fn(lambda x, y: (torch.cumsum(x, -1), torch.cumprod(y, -1))),
                  {"x": torch.rand(2, 1 << 20), "y": 1 + 1e-3 * torch.randn(2, 1 << 14)})


def column_sum(n: int = 64) -> Recipe:
    """Sums down the 4 columns of ``64 n`` rows: lowered as a loop over the rows around a nest
    over the columns, which runs once per row."""
    return Recipe(_Fn(lambda x: x.sum(0)), {"x": torch.rand(64 * n, 4)})


def _float32_only(x):
    if x.dtype != torch.float32:
        raise TypeError("float32 only")
    return x * 2


def float32_only(n: int = 64) -> Recipe:
    """A forward that refuses any dtype but float32 (so it has no float64 run)."""
    return Recipe(_Fn(_float32_only), {"x": torch.randn(n)})


def scalar_operands(n: int = 64) -> Recipe:
    """Binary ops with a Python number where torch-mlir lowers only the tensor-tensor form
    (``frontend.tensor_overloads``): or and xor of an int tensor and an int or a bool, and
    bucketize of a number (a 0-d int64)."""
    return Recipe(_Fn(lambda i, b: (i | 3, i ^ 5, i ^ True, torch.bucketize(0.3, b))),
                  {"i": torch.arange(-n, n), "b": torch.linspace(-1, 1, 9)})


def negative_padding(n: int = 8) -> Recipe:
    """``F.pad`` with negative amounts (a crop) beside positive ones, on two dimensions, and
    a crop alone."""
    return Recipe(_Fn(lambda x: (nn.functional.pad(x, (-2, 1, 3, -1), value=0.5),
                                 nn.functional.pad(x, (0, -3)))),
                  {"x": torch.randn(1, 2, n, n + 2)})


def constant_comparisons(n: int = 8) -> Recipe:
    """Comparisons of tensors built inside forward with a number of the other kind:
    torch-mlir folded the float ones to the wrong answer (``cosine_embedding_loss`` with a
    target of ones was 0, eager 1.04) and crashed on the int one."""
    def forward(x):
        ones, threes = torch.ones(n), torch.full((n,), 3, dtype=torch.int64)
        return (ones == 1, torch.full((n,), 2.0) > 1, ones != 1, threes > 2.5, threes <= 3,
                torch.where(ones == 1, x, 0.0), (x > 0) == 1,
                nn.functional.cosine_embedding_loss(x.view(2, -1), -x.view(2, -1), torch.ones(2)))
    return Recipe(_Fn(forward), {"x": torch.randn(n)})


def constant_arithmetic(n: int = 8) -> Recipe:
    """Elementwise ops on constants built inside forward, where torch-mlir's folders were
    wrong (sign of ones: -1; -7 % 3: -1, PyTorch 2; -7 // 2: -2^63) or crashed (sign of
    zeros), beside a constant that is not a splat (``arange``)."""
    def forward(x):
        ones, sevens = torch.ones(n), torch.full((n,), -7)
        return (ones.sign() * x, sevens % 3 + x, sevens // 2 + x, torch.zeros(n).sign() + x,
                torch.full((n,), 2) ** 3 + x, (torch.arange(n) % 3 == 0) | (x > 0))
    return Recipe(_Fn(forward), {"x": torch.randn(n)})


def _rotary(x: torch.Tensor, freqs_cis: torch.Tensor) -> torch.Tensor:
    """Meta's llama ``apply_rotary_emb`` for one tensor: pairs of features as complex numbers,
    rotated by multiplication."""
    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    shape = [d if i in (1, x_.ndim - 1) else 1 for i, d in enumerate(x_.shape)]
    return torch.view_as_real(x_ * freqs_cis.view(*shape)).flatten(3).type_as(x)


class _ComplexRotary(nn.Module):
    """Rotary embedding as Meta's llama writes it: a complex64 buffer of unit rotations
    (``torch.polar``), sliced to the sequence, and ``view_as_complex`` / ``view_as_real``."""

    def __init__(self, dim: int, heads: int, seq: int) -> None:
        super().__init__()
        self.heads = heads
        self.wq = nn.Linear(dim, dim, bias=False)
        head = dim // heads
        freqs = 1.0 / (10000.0 ** (torch.arange(0, head, 2).float() / head))
        angles = torch.outer(torch.arange(2 * seq).float(), freqs)
        self.register_buffer("freqs_cis", torch.polar(torch.ones_like(angles), angles),
                             persistent=False)

    def forward(self, x):
        batch, seq, dim = x.shape
        q = self.wq(x).view(batch, seq, self.heads, dim // self.heads)
        return _rotary(q, self.freqs_cis[0:seq])


def rotary_complex(n: int = 8) -> Recipe:
    return Recipe(_ComplexRotary(32, 2, n), {"x": torch.randn(2, n, 32)})


def complex_arithmetic(n: int = 8) -> Recipe:
    """A complex input and a complex output, and the arithmetic between: products and
    quotients (with Python complex numbers too), conjugates, powers, exp, log, sin,
    magnitude, phase, sums and slices."""
    def forward(z, x):
        w = torch.complex(x, x.flip(-1)) * (0.5 - 2j)
        q = (z * w + z / w - w.conj()) ** 2 + torch.exp(z) - torch.log(w) * torch.sin(z)
        r = torch.where(x > 0, q, z ** 0.5).cumsum(-1)[:, 1:]
        return r, torch.stack((q.abs(), q.angle(), w.real, (z ** -3).imag)), q.mean(0)
    z = torch.complex(torch.randn(4, n), torch.randn(4, n))
    return Recipe(_Fn(forward), {"z": z, "x": torch.randn(4, n)})


class _ComplexLinear(nn.Module):
    """A complex parameter (``Module.to(float32)`` would drop its imaginary part), a complex128
    buffer, a complex literal and a matrix product."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(n, n, dtype=torch.complex64))
        self.register_buffer("b", torch.randn(n, dtype=torch.complex128))

    def forward(self, x):
        z = torch.complex(x, x.flip(-1)) @ self.w + self.b * torch.tensor([1j, -1.0, 2.0, 0.5j]
                                                                          ).repeat(len(self.b) // 4)
        return torch.view_as_real(z.conj() @ z.transpose(0, 1)), (z.conj() * z).real


def complex_parameter(n: int = 8) -> Recipe:
    return Recipe(_ComplexLinear(n), {"x": torch.randn(3, n)})


def complex_rules(n: int = 8) -> Recipe:
    """The rules of ``pimbuild.frontend.complexes`` the other complex recipes leave out: sgn,
    reciprocal, cos, complex exponents, batched and mixed matrix products, a complex fill,
    a cast to a real dtype and back, a split, and comparisons."""
    def forward(a, b):
        z, w = torch.complex(a, b), torch.view_as_complex(torch.stack((b, a), -1))
        ones = torch.full((n,), 1 - 1j)
        parts = z.chunk(2, dim=-1)
        return torch.view_as_real(torch.stack((
            z.sgn(), w.reciprocal(), torch.cos(z), z ** w, z ** (0.5 - 1j), ones * z,
            torch.einsum("ij,kj->ik", z, w)[:, :n], torch.cat(parts[::-1], -1)))), \
            z.to(torch.float32) + (a.to(w.dtype) @ w.transpose(0, 1)).imag.sum(1, keepdim=True), \
            (z == torch.where(a > 0, z, w)) & (z != 1j)
    return Recipe(_Fn(forward), {"a": torch.randn(n, n), "b": torch.randn(n, n)})


def substituted_ops(n: int = 8) -> Recipe:
    """Ops torch-mlir cannot lower, written by
    pimbuild.frontend.substitutes: stable sorts (ties, NaN,
    -0.0, both directions), searchsorted (both sides, batched, a number, NaN values), median
    (NaN in a row, a tie, keepdim, all elements), copysign (of -0.0 and of a number) and
    erfinv (both ranges, +-1, beyond, NaN)."""
    def forward(a, seq, y, ties):
        return (*torch.sort(torch.cat((a, ties), 1), stable=True),
                *torch.sort(torch.cat((a, ties), 1), dim=1, descending=True, stable=True),
                torch.argsort(ties.long(), dim=0, stable=True), torch.searchsorted(seq, a),
                torch.searchsorted(seq, a, right=True),
                torch.searchsorted(seq[0], a, side="right"), torch.searchsorted(seq[0], 0.3),
                *torch.median(a, 1), torch.median(a[1]), torch.median(a[:, 2:], 0, True).values,
                torch.copysign(a, -a), torch.copysign(y, -0.0), torch.copysign(y, 2),
                torch.erfinv(y))
    nan = float("nan")
    a = torch.tensor([[0.3, nan, -1.0, 2.0, 0.3], [1.0, 1.0, -0.0, 0.0, 5.0]])
    seq = torch.tensor([[-1.0, 0.0, 0.3, 0.3, 2.0], [0.0, 0.5, 1.0, 1.0, 3.0]])
    y = torch.cat((torch.tensor([-1.0, -0.9999, -0.7, 0.0, -0.0, 0.69, 0.71, 0.999999, 1.0,
                                 1.5, nan]), torch.linspace(-1, 1, n * 8)))
    ties = torch.arange(2 * n * 4).reshape(2, -1).remainder(3).float()
    return Recipe(_Fn(forward), {"a": a, "seq": seq, "y": y, "ties": ties})


class _Bags(nn.Module):
    """nn.EmbeddingBag in its three modes: padding rows, an empty bag, a bag of padding only,
    per-sample weights with include_last_offset, and a 2-D input (bags of equal length)."""

    def __init__(self) -> None:
        super().__init__()
        self.largest = nn.EmbeddingBag(20, 4, mode="max", padding_idx=3)
        self.mean = nn.EmbeddingBag(20, 4, mode="mean", padding_idx=0)
        self.sum = nn.EmbeddingBag(20, 4, mode="sum", include_last_offset=True)

    def forward(self, ids, offsets, weights, rows):
        ends = torch.cat((offsets, torch.tensor([ids.shape[0]])))
        return (self.largest(ids, offsets), self.mean(ids, offsets),
                self.sum(ids, ends, per_sample_weights=weights), self.mean(rows),
                self.largest(rows))


def embedding_bags(n: int = 8) -> Recipe:
    ids = torch.tensor([3, 3, 5, 0, 7, 3, 19, 0, 2])
    offsets = torch.tensor([0, 2, 2, 5, 9])  # bag 0 is padding for max; bags 1 and 4 empty
    return Recipe(_Bags(), {"ids": ids, "offsets": offsets, "weights": torch.randn(9),
                            "rows": torch.randint(0, 20, (n, 3))})


def distances(n: int = 8) -> Recipe:
    """torch.cdist (``aten._cdist_forward``) at p = 2 by differences and by a matrix product
    (more than 25 rows, or asked for), and at p = 0, 1, 3.5 and inf."""
    def forward(a, b, c, d):
        return (torch.cdist(a, b), torch.cdist(a, b, p=0), torch.cdist(a, b, p=1),
                torch.cdist(a, b, p=3.5), torch.cdist(a, b, p=float("inf")), torch.cdist(c, d),
                torch.cdist(a, b, compute_mode="use_mm_for_euclid_dist"))
    a, b = torch.randn(2, 7, n), torch.randn(2, 9, n)
    a[0, 0, 1] = b[0, 0, 1] = 0.0  # p = 0 counts the differences that are not zero
    return Recipe(_Fn(forward), {"a": a, "b": b, "c": torch.randn(40, n), "d": torch.randn(30, n)})


def outputs_computed_alike(n: int = 8) -> Recipe:
    """Two outputs computed alike, which MLIR's CSE makes one value returned twice (and
    maximum and max of the same pair, with NaN); bufferization crashed on it."""
    nan = float("nan")
    a = torch.tensor([nan, 1.0, 2.0, nan] * (n // 4))
    b = torch.tensor([1.0, nan, 3.0, nan] * (n // 4))
    return Recipe(_Fn(lambda a, b: (a * 2, a * 2, torch.maximum(a, b), torch.max(a, b), a)),
                  {"a": a, "b": b})


def nan_propagation(n: int = 8) -> Recipe:
    """NaN through the ops torch-mlir lowered with ``>`` / ``<`` and a select, which pass
    over it: the clamps (a NaN bound too), hardtanh, relu6, hardsigmoid, and the indices of
    argmax, argmin, max and min along a dim and over all (ties: the first)."""
    def forward(a, lo):
        return (a.clamp(-1.0, 1.0), a.clamp(min=lo), a.clamp_max(0.5), F.hardtanh(a),
                F.relu6(a * 4), F.hardsigmoid(a), a.argmax(1), a.argmin(1, keepdim=True),
                *a.max(1), *a.min(0), a.argmax(), torch.maximum(lo, a))
    nan = float("nan")
    a = torch.tensor([[1.0, nan, 3.0, 3.0], [2.0, 2.0, -1.0, 0.5], [nan, 0.0, nan, -2.0]])
    a = a.repeat(1, n // 4)
    lo = torch.tensor([0.0, 1.0, nan, -1.0]).repeat(n // 4)
    return Recipe(_Fn(forward), {"a": a, "lo": lo})
