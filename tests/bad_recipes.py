"""Recipes that must fail, one way each (used by tests/test_errors.py)."""

from __future__ import annotations

import collections

import torch
from torch import nn

from pimbuild.recipes import Recipe


class _Fn(nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


def dynamic(n: int = 8) -> Recipe:
    """Marks the first dimension of its input dynamic."""
    return Recipe(_Fn(torch.relu), {"tokens": torch.randn(n, 4)},
                  dynamic_shapes={"xs": ({0: torch.export.Dim("seq", min=2, max=64)},)})


def _raise(x):
    raise ValueError("recipe forward is broken on purpose")


def raising(n: int = 8) -> Recipe:
    return Recipe(_Fn(_raise), {"x": torch.randn(n)})


def builder_type_error(n: int = 8) -> Recipe:
    """Takes the size it is given, then raises a TypeError of its own."""
    return Recipe(_Fn(torch.relu), {"x": torch.randn(n)}, **{"bogus_field": 1})


def two_sizes(n: int, m: int) -> Recipe:
    """Needs a size ``m`` that model=relu does not give."""
    return Recipe(_Fn(torch.relu), {"x": torch.randn(n, m)})


def unlowerable(n: int = 4) -> Recipe:
    """QR decomposition: torch-mlir has no linalg lowering for aten.linalg_qr."""
    return Recipe(_Fn(lambda x: torch.linalg.qr(x).Q), {"x": torch.randn(n, n)})


class _Bessel(nn.Module):
    def forward(self, x):
        return torch.i0(x.view(2, -1))


def undefined_operator(n: int = 8) -> Recipe:
    """The modified Bessel function i0, in a submodule: an aten op torch-mlir has no
    definition of (median was one, until pimbuild.frontend.substitutes wrote it)."""
    return Recipe(nn.Sequential(collections.OrderedDict(inner=_Bessel())), {"x": torch.randn(n)})


class _Experts(nn.Module):
    def forward(self, ids):
        return torch.histc(ids, bins=4, min=0, max=3)  # tokens per expert, as transformers'


def grouped_experts(n: int = 8) -> Recipe:
    """A mixture of experts counting each expert's tokens with ``histc`` (transformers'
    grouped experts do): torch-mlir has no definition of it; the error says the way round."""
    ids = torch.randint(0, 4, (n,), generator=torch.Generator().manual_seed(0)).float()
    return Recipe(nn.Sequential(collections.OrderedDict(experts=_Experts())), {"ids": ids})


def not_a_recipe(n: int = 8) -> tuple:
    """Returns the module and inputs, but not as a Recipe."""
    return _Fn(torch.relu), {"x": torch.randn(n)}


def scalar_output(n: int = 8) -> Recipe:
    """The forward returns a Python float."""
    return Recipe(_Fn(lambda x: float(x.sum())), {"x": torch.randn(n)})


def string_output(n: int = 8) -> Recipe:
    """The forward returns a string beside a tensor (a Python scalar of no number type)."""
    return Recipe(_Fn(lambda x: (torch.relu(x), "done")), {"x": torch.randn(n)})


class KeyValueCache:
    """An object of the model's own, as a HuggingFace model's DynamicCache."""

    def __init__(self, keys: torch.Tensor) -> None:
        self.keys = keys


def returns_a_cache(n: int = 8) -> Recipe:
    """The forward returns its logits and a cache object, as a HuggingFace causal LM does."""
    return Recipe(_Fn(lambda x: (torch.relu(x), KeyValueCache(x * 2))), {"x": torch.randn(n)})


def half_output(n: int = 8) -> Recipe:
    """A float16 output: the lowered program computes in model.dtype."""
    return Recipe(_Fn(lambda x: x.half() * 2), {"x": torch.randn(n)})


def same_output_twice(n: int = 8) -> Recipe:
    """Returns one tensor twice (one buffer for two results)."""
    def fn(x):
        y = torch.relu(x)
        return y, y
    return Recipe(_Fn(fn), {"x": torch.randn(n)})


def writes_its_input(n: int = 8) -> Recipe:
    """Scales its input in place (the lowered program never writes its arguments)."""
    def fn(x):
        x.mul_(2)
        return x + 1
    return Recipe(_Fn(fn), {"x": torch.randn(n)})


class _Noisy(nn.Module):
    """Adds noise it draws itself (a submodule, so the message names where)."""

    def __init__(self) -> None:
        super().__init__()
        self.noise = _Fn(lambda x: x + torch.randn_like(x))

    def forward(self, x):
        return self.noise(torch.relu(x))


def draws_random_numbers(n: int = 8) -> Recipe:
    return Recipe(_Noisy(), {"x": torch.randn(n)})


def float_in_dict(n: int = 8) -> Recipe:
    """A dict of results, one of them a Python float."""
    return Recipe(_Fn(lambda x: {"y": torch.relu(x), "loss": float(x.sum())}),
                  {"x": torch.randn(n)})


def data_dependent_shape(n: int = 8) -> Recipe:
    """masked_select: the result's length depends on the values of the input."""
    return Recipe(_Fn(lambda x: torch.masked_select(x, x > 0) * 2), {"x": torch.randn(n)})


def branches_on_values(n: int = 8) -> Recipe:
    """Python control flow on a tensor's value."""
    return Recipe(_Fn(lambda x: x * 2 if x.sum() > 0 else x - 1), {"x": torch.randn(n)})


class _Branch(nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: t * 2, lambda t: t - 1, (x,))


def uses_cond(n: int = 8) -> Recipe:
    """torch.cond in a submodule: control flow as a higher-order operator, which exports but
    which torch-mlir's importer does not take."""
    return Recipe(nn.Sequential(collections.OrderedDict(branch=_Branch())), {"x": torch.randn(n)})


def uint16_input(n: int = 8) -> Recipe:
    """An input of an integer dtype numpy's ctypes bridge does not take."""
    return Recipe(_Fn(lambda x: x.to(torch.int32) * 2), {"x": torch.arange(n).to(torch.uint16)})


def number_input(n: int = 8) -> Recipe:
    """An input that is a Python number, not a tensor."""
    return Recipe(_Fn(lambda x, k: x * k), {"x": torch.randn(n), "k": 3})


def complex_fft(n: int = 8) -> Recipe:
    """An FFT: an op on complex tensors pimbuild.frontend.complexes has no rule for."""
    return Recipe(_Fn(lambda x: torch.fft.rfft(x).abs()), {"x": torch.randn(4, n)})


def side_effects(n: int = 4) -> Recipe:
    """linalg.inv: torch.export threads a token through its runtime error check."""
    return Recipe(_Fn(lambda x: torch.linalg.inv(x + n * torch.eye(n))), {"x": torch.randn(n, n)})


def int8_scaled(n: int = 8) -> Recipe:
    """uint8 times a scalar: torch-mlir's TorchToLinalg segfaults (llvm/torch-mlir#4725)."""
    return Recipe(_Fn(lambda x: x * 3), {"x": torch.arange(n, dtype=torch.uint8)})


def dynamically_quantized(n: int = 8) -> Recipe:
    """torch.ao dynamic quantization: the Linear's weights become a TorchScript object."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization's deprecation notices
        module = torch.ao.quantization.quantize_dynamic(nn.Sequential(nn.Linear(n, n)),
                                                        {nn.Linear}, dtype=torch.qint8)
    return Recipe(module, {"x": torch.randn(2, n)})


def scripted_submodule(n: int = 8) -> Recipe:
    """A submodule compiled with torch.jit.script."""
    return Recipe(nn.Sequential(torch.jit.script(nn.Linear(n, n)), nn.ReLU()),
                  {"x": torch.randn(2, n)})


def writes_its_parameter(n: int = 8) -> Recipe:
    """nn.Embedding with max_norm renormalizes the weight rows it looks up, in place."""
    return Recipe(nn.Embedding(4 * n, n, max_norm=1.0),
                  {"i": torch.randint(0, 4 * n, (2, 3))})


def large_literal(n: int = 8) -> Recipe:
    """A 5000-element tensor built from a literal inside forward (more than signature.json
    keeps)."""
    return Recipe(_Fn(lambda x: x + torch.tensor([float(i) for i in range(5000)])[:n]),
                  {"x": torch.randn(n)})


def _declared(**declared) -> Recipe:
    """A linear layer (16 -> 16, one output) with the given declarations."""
    torch.manual_seed(0)
    return Recipe(nn.Linear(16, 16), {"x": torch.randn(2, 16)}, **declared)


def zero_layers(n: int = 8) -> Recipe:
    return _declared(layers=0)


def fractional_tokens(n: int = 8) -> Recipe:
    return _declared(tokens=2.5)


def unknown_unit(n: int = 8) -> Recipe:
    return _declared(unit="images")


def carry_of_no_input(n: int = 8) -> Recipe:
    return _declared(layers=4, carry={"y": 0})


def state_of_no_output(n: int = 8) -> Recipe:
    return _declared(state={"x": 1})


def carry_of_another_shape(n: int = 8) -> Recipe:
    torch.manual_seed(0)
    return Recipe(nn.Linear(16, 8), {"x": torch.randn(2, 16)}, layers=4, carry={"x": 0})
