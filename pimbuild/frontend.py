"""The PyTorch side of lowering: build a recipe, run it eagerly, export it at fixed shapes,
name every node's source, import it into MLIR, and rebuild the lowered function's arguments.

``annotate_sources`` rewrites each FX node's stack trace so that its MLIR location names its
source: ``File "<module path>|<torch op>#<torch node>|<aten op>", line <i>,`` (the torch op
the model wrote, before decomposition, and the aten op it decomposed into).

torch-mlir is imported only where it is used (export, import, materialize), so that building
and running a recipe (``build_recipe``, the GPU target's ``cuda`` backend) works on a machine
whose Python has torch but no torch-mlir.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import json
import math
import warnings
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.export import ExportedProgram

from pimbuild import recipes
from pimbuild.errors import ConfigError, RecipeError, first_line

if TYPE_CHECKING:
    from pimbuild.lower import ModelParams

FUNC_NAME = "forward"
DTYPES = {"float32": torch.float32}
COMPLEX = {torch.float32: torch.complex64, torch.float64: torch.complex128}


def dtype_name(dtype: torch.dtype) -> str:
    """``float32`` for ``torch.float32``: how messages and signature.json name a dtype."""
    return str(dtype).removeprefix("torch.")


def build_recipe(p: ModelParams) -> recipes.Recipe:
    """Call the recipe builder under the config's seed, in the config's dtype."""
    torch.manual_seed(p.seed)
    try:
        builder = recipes.resolve(p.recipe)
    except Exception as e:  # the user's module may raise anything while it imports
        raise RecipeError(f"model.recipe '{p.recipe}' cannot be loaded: "
                          f"{first_line(e)}") from None
    _check_size(p, builder)
    try:
        recipe = builder(**p.size)
    except Exception as e:  # the user's builder may raise anything
        raise RecipeError(f"model '{p.name}': the recipe builder raised "
                          f"{first_line(e)}") from None
    if not isinstance(recipe, recipes.Recipe):
        raise RecipeError(f"model '{p.name}': the recipe builder {p.recipe} returned "
                          f"{type(recipe).__name__}, not a pimbuild.recipes.Recipe")
    for name, value in recipe.inputs.items():
        if not isinstance(value, torch.Tensor):
            raise RecipeError(f"model '{p.name}': input '{name}' is a {type(value).__name__}; "
                              f"pimbuild needs every input to be a tensor (a fixed value can "
                              f"be a constant of the module instead)")
    dtype = DTYPES[p.dtype]
    recipe.cast = foreign_floats(recipe, dtype)
    recipe.evaluated = training_layers(recipe.module)
    recipe.module = recipe.module._apply(functools.partial(_cast, dtype=dtype)).eval()
    recipe.inputs = {k: _cast(v, dtype) for k, v in recipe.inputs.items()}
    _reject_input_dtypes(p, recipe)
    return recipe


def _check_size(p: ModelParams, builder) -> None:
    """A ConfigError where ``model.size`` does not fit the builder's parameters (an
    unknown or a missing one); a TypeError the builder raises itself is the recipe's."""
    try:
        signature = inspect.signature(builder)
    except (TypeError, ValueError):  # no signature to read (a C function): the call says
        return
    try:
        signature.bind(**p.size)
    except TypeError as e:
        raise ConfigError(f"model '{p.name}': bad size parameters {dict(p.size)}: {e} "
                          f"(the builder {p.recipe} takes {signature})") from None


UNITS = ("tokens", "requests")


def check_declarations(p: ModelParams, recipe: recipes.Recipe, outputs: list) -> None:
    """What the recipe declares about the model (``recipes.Recipe``: counts, ``unit``,
    ``carry`` and ``state``) against what it is: positive whole counts, a known unit, each
    carried or state output an output of the forward feeding one of its inputs, and a
    carried one (the next layer's input) of that input's shape and dtype; a state output
    may be a delta (the new keys a KV cache appends). A RecipeError names the first that is
    not."""
    def bad(what: str) -> RecipeError:
        return RecipeError(f"model '{p.name}': the recipe's {what}")

    for name, least in (("layers", 1), ("tokens", 1), ("forwards_per_request", 1),
                        ("prompt", 0)):
        value = getattr(recipe, name)
        if type(value) is not int or value < least:
            raise bad(f"{name} is {value!r}; it must be a whole number >= {least}")
    if recipe.unit not in UNITS:
        raise bad(f"unit is {recipe.unit!r}; choose from {', '.join(UNITS)}")
    for kind in ("carry", "state"):
        for name, index in getattr(recipe, kind).items():
            if name not in recipe.inputs:
                raise bad(f"{kind} names input {name!r}, but the forward's inputs are "
                          f"{', '.join(recipe.inputs) or 'none'}")
            if type(index) is not int or not 0 <= index < len(outputs):
                raise bad(f"{kind} feeds input {name!r} from output {index!r}, but the "
                          f"forward returns {len(outputs)} output(s)")
            have, want = outputs[index], recipe.inputs[name]
            if kind == "carry" and (have.shape != want.shape or have.dtype != want.dtype):
                raise bad(f"{kind} feeds input {name!r} ({_kind(want)}) from output {index} "
                          f"({_kind(have)}); they must have one shape and dtype")


def _kind(t: torch.Tensor) -> str:
    return f"{dtype_name(t.dtype)} {list(t.shape)}"


def _reject_input_dtypes(p: ModelParams, recipe: recipes.Recipe) -> None:
    """An input of a dtype the lowered program cannot take (uint16, quantized), refused by
    name before it reaches the lowering; floating-point inputs are already ``model.dtype``,
    and a complex one is taken as pairs of reals (``complexes``)."""
    from pimbuild.mlir import NP_DTYPES

    for name, value in recipe.inputs.items():
        dtype = dtype_name(_real_view(value).dtype)  # complex: passed as pairs of reals
        if dtype not in NP_DTYPES:
            raise RecipeError(f"model '{p.name}': input '{name}' has dtype {dtype}, which the "
                              f"lowered program cannot take (supported: "
                              f"{', '.join(NP_DTYPES)})")


def foreign_floats(recipe: recipes.Recipe, dtype: torch.dtype) -> dict[str, dict[str, Any]]:
    """The floating-point dtypes other than ``dtype`` of the module's parameters and buffers
    (dtype -> count) and of the inputs (name -> dtype): what casting to ``dtype`` changes.
    Empty dicts are left out."""
    params = dict(Counter(dtype_name(t.dtype)
                          for t in [*recipe.module.parameters(), *recipe.module.buffers()]
                          if _cast(t, dtype).dtype != t.dtype))
    inputs = {k: dtype_name(v.dtype) for k, v in recipe.inputs.items()
              if _cast(v, dtype).dtype != v.dtype}
    return {k: v for k, v in (("parameters", params), ("inputs", inputs)) if v}


def _cast(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A floating-point tensor in ``dtype``, a complex one in the complex dtype of its
    precision (``Module.to(dtype)`` would drop its imaginary part), any other as it is."""
    if t.is_complex():
        return t.to(COMPLEX[dtype])
    return t.to(dtype) if t.is_floating_point() else t


def training_layers(module: torch.nn.Module) -> list[str]:
    """The kinds of layer in ``module`` that are in training mode and whose forward changes
    with it, as PyTorch documents: dropout (p > 0, in its own module or inside attention and
    stacked RNNs) and normalisation with running statistics. ``eval()`` turns them to
    inference; other modules' mode changes nothing they compute."""
    from torch import nn

    def changes(m: nn.Module) -> bool:
        if isinstance(m, nn.modules.dropout._DropoutNd):
            return m.p > 0
        if isinstance(m, nn.modules.batchnorm._NormBase):
            return m.track_running_stats
        if isinstance(m, nn.MultiheadAttention):
            return m.dropout > 0
        if isinstance(m, nn.RNNBase):
            return m.dropout > 0 and m.num_layers > 1
        return False

    return sorted({type(m).__name__ for m in module.modules() if m.training and changes(m)})


def eager(p: ModelParams, recipe: recipes.Recipe, layout: list[str | None] | None = None
          ) -> list[torch.Tensor]:
    """Run the model in PyTorch eager mode; a forward that raises is a RecipeError. Buffers
    the forward writes in place are restored afterwards, so that the module keeps the state
    the lowered program starts from. ``layout`` (``mutation_layout``): the lowered program's
    results in order, a written buffer's name or None for the next output of the forward;
    its written buffers' new values are returned in their places."""
    from pimbuild.mlir import NP_DTYPES  # the dtypes the lowered program can return

    after: dict[str, torch.Tensor] = {}
    try:
        with torch.no_grad(), kept_buffers(recipe.module, after):
            out = recipe.module(*recipe.inputs.values())
    except Exception as e:  # the user's forward may raise anything
        raise RecipeError(f"the forward of model '{p.name}' raised {first_line(e)}") from None
    outputs, names = output_leaves(out)
    for i, (o, name) in enumerate(zip(outputs, names, strict=True)):
        if any(o is earlier for earlier in outputs[:i]):
            raise RecipeError(f"model '{p.name}': output {name} is the same tensor as an "
                              f"earlier output; return it once")
        if not isinstance(o, torch.Tensor):
            kind = type(o).__name__
            hint = (" (a HuggingFace model returns its key-value cache unless use_cache=False)"
                    if "cache" in kind.lower() else "")
            raise RecipeError(f"model '{p.name}': output {name} of the forward is a {kind}; "
                              f"pimbuild needs every output to be a tensor: return only the "
                              f"tensors to check, from a wrapper module if need be{hint}")
        dtype = dtype_name(_real_view(o).dtype)  # complex: returned as pairs of reals
        if dtype not in NP_DTYPES:
            raise RecipeError(f"model '{p.name}': output {name} has dtype {dtype}, which the "
                              f"lowered program cannot return (supported: "
                              f"{', '.join(NP_DTYPES)})")
    outputs = [_real_view(o) for o in outputs]
    if layout is None:
        return outputs
    user = iter(outputs)
    return [_real_view(after[slot]) if slot is not None else next(user) for slot in layout]


@contextlib.contextmanager
def kept_buffers(module: torch.nn.Module, after: dict[str, torch.Tensor] | None = None):
    """Restore the module's buffers on leaving, in place and by name, as they were on
    entering: a forward that writes a buffer (in place or by assignment) leaves the module in
    the state the lowered program starts from, and the arguments ``materialize`` made (views
    of the buffers) unchanged. ``after``: filled with copies of the buffers as the forward
    left them."""
    before = {name: (b, b.clone()) for name, b in module.named_buffers()}
    try:
        yield
    finally:
        if after is not None:
            after.update({name: b.detach().clone() for name, b in module.named_buffers()})
        with torch.no_grad():
            for name, (tensor, saved) in before.items():
                tensor.copy_(saved)
                _set_attribute(module, name, tensor)


def _real_view(value: Any) -> Any:
    """A complex tensor as ``torch.view_as_real`` of it, as the lowered program takes and
    returns it (``complexes.real_pairs``); anything else as it is."""
    if isinstance(value, torch.Tensor) and value.is_complex():
        return torch.view_as_real(value.resolve_conj())
    return value


def output_leaves(out: Any) -> tuple[list[Any], list[str]]:
    """The forward's results as torch.export flattens them (pytree leaves: a tuple, list or
    dict of tensors, nested or not, or a registered output class), each with a name for
    messages: its index, then its path where the results are nested (``3 (['logits'])``).
    A recipe's ``carry`` and ``state`` count these leaves."""
    from torch.utils import _pytree as pytree

    leaves = pytree.tree_flatten_with_path(out)[0]
    flat = all(len(path) == 0 or (len(path) == 1 and isinstance(path[0], pytree.SequenceKey))
               for path, _ in leaves)
    names = [str(i) if flat else f"{i} ({pytree.keystr(path)})"
             for i, (path, _) in enumerate(leaves)]
    return [leaf for _, leaf in leaves], names


def _set_attribute(module: torch.nn.Module, path: str, tensor: torch.Tensor) -> None:
    """Put back a buffer a forward replaced by assignment (``self.cache = ...``)."""
    *parents, leaf = path.split(".")
    owner = functools.reduce(getattr, parents, module)
    if owner._buffers.get(leaf) is not tensor:
        owner._buffers[leaf] = tensor


def mutation_layout(p: ModelParams, prog: ExportedProgram, input_names: list[str]
                    ) -> list[str | None]:
    """The exported program's results in order: the name of a buffer the forward writes in
    place (torch.export returns its new value, and pimbuild treats it as state the next
    forward reads), None for an output of the forward. A forward that writes one of its
    inputs in place is refused: the lowered program never writes its arguments."""
    names = dict(zip(prog.graph_signature.user_inputs, input_names, strict=False))
    layout = []
    for spec in prog.graph_signature.output_specs:
        kind = spec.kind.name
        if kind == "BUFFER_MUTATION":
            layout.append(spec.target)
        elif kind == "USER_OUTPUT":
            layout.append(None)
        elif kind == "USER_INPUT_MUTATION":
            name = names.get(spec.target, spec.target)
            raise RecipeError(f"model '{p.name}': the forward writes its input '{name}' in "
                              f"place; clone it first (the lowered program does not write "
                              f"its arguments)")
        elif kind == "PARAMETER_MUTATION":
            raise RecipeError(f"model '{p.name}': the forward writes its parameter "
                              f"'{spec.target}' in place (as nn.Embedding with max_norm "
                              f"renormalizes the rows it looks up); pimbuild lowers forwards "
                              f"that leave their parameters as they are: update it before "
                              f"the build, or hold it as a buffer (state the forward writes)")
        else:
            raise RecipeError(f"model '{p.name}': the exported program has a result of kind "
                              f"{kind}, which pimbuild cannot lower")
    return layout


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
    from pimbuild import mlir

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

    from pimbuild import substitutes

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


def export(p: ModelParams, recipe: recipes.Recipe) -> ExportedProgram:
    """torch.export at fixed shapes, decomposed with ``decompositions()``; no dynamic dims."""
    _reject_script_objects(p, recipe.module)
    table = decompositions()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prog = torch.export.export(recipe.module, tuple(recipe.inputs.values()),
                                       dynamic_shapes=recipe.dynamic_shapes, strict=False)
            prog = prog.run_decompositions(table)
    except Exception as e:
        from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

        hint = (" (the forward's control flow depends on a tensor's values; pimbuild needs "
                "one static graph)" if isinstance(e, GuardOnDataDependentSymNode) else "")
        raise RecipeError(f"model '{p.name}' cannot be exported: {type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else ''}{hint}") from None
    _reject_dynamic_dims(p, prog, list(recipe.inputs))
    _real_pairs(p, prog, table)
    _reject_unlowerable_values(p, prog)
    _reject_random_ops(p, prog)
    _reject_large_literals(p, prog, recipe.module)
    return prog


def _real_pairs(p: ModelParams, prog: ExportedProgram, table: dict) -> None:
    """Complex tensors become pairs of real tensors (``complexes.real_pairs``, its rules
    decomposed with the export's ``table``); an op it has no rule for is refused by name."""
    from pimbuild import complexes

    try:
        complexes.real_pairs(prog, table)
    except complexes.NoRule as e:
        what = ("the forward" if e.node.op in ("output", "placeholder")
                else f"{_torch_op(e.node)[1]}{_where(e.node)}")
        raise RecipeError(f"model '{p.name}': {what} {e} (pimbuild computes complex tensors "
                          f"as pairs of real ones: pimbuild/complexes.py)") from None


def _reject_script_objects(p: ModelParams, module: torch.nn.Module) -> None:
    """A TorchScript module (``torch.jit.script`` or ``trace``) and a submodule holding a
    TorchScript object (``torch.ScriptObject``: torch.ao quantization's packed weights, a
    custom C++ class) are refused before export, whose own error for one is an
    AttributeError about ``__obj_flatten__``."""
    for path, sub in module.named_modules():
        if isinstance(sub, torch.jit.ScriptModule):
            raise RecipeError(f"model '{p.name}': '{path or 'the model'}' is a TorchScript module "
                              f"(torch.jit.script or trace); pimbuild exports Python modules: "
                              f"build the model from the module before it was scripted")
        for name, value in vars(sub).items():
            if isinstance(value, torch.ScriptObject):
                where = f"'{path}.{name}'" if path else f"'{name}'"
                raise RecipeError(
                    f"model '{p.name}': {where} is a TorchScript object "
                    f"({value._type().qualified_name()}), as torch.ao quantization's packed "
                    f"weights are; pimbuild lowers modules whose state is tensors: keep the "
                    f"float model, or quantize with plain tensors (int8 weights and a scale)")


def _reject_large_literals(p: ModelParams, prog: ExportedProgram,
                           module: torch.nn.Module) -> None:
    """A tensor literal inside forward is kept in signature.json (``_literal``) only up to
    ``LITERAL_MAX`` elements; a larger one is refused before any IR exists."""
    for spec in prog.graph_signature.input_specs:
        if spec.kind.name != "CONSTANT_TENSOR" or _lookup(module, spec.target) is not None:
            continue
        n = prog.constants[spec.target].numel()
        if n > LITERAL_MAX:
            raise RecipeError(f"model '{p.name}': the forward builds a tensor of {n} elements "
                              f"from a literal ('{spec.target}'); make it a buffer of the "
                              f"module (pimbuild keeps literals of up to {LITERAL_MAX})")


def _reject_unlowerable_values(p: ModelParams, prog: ExportedProgram) -> None:
    """Refused by op, before lowering: a result whose extent depends on the values of its
    input (nonzero, masked_select, unique: a loop bound extract cannot know), a complex
    result (none is left after ``_real_pairs``; kept as a guard), and an op with side effects
    (torch.export threads a token through it: a runtime check such as linalg.inv's)."""
    for node in prog.graph.nodes:
        if node.op != "call_function":
            continue
        where = _where(node)
        if node.target is torch.ops.higher_order.with_effects:
            raise RecipeError(f"model '{p.name}': the forward calls {node.args[1]}{where}, an "
                              f"op with side effects; pimbuild lowers side-effect-free "
                              f"forwards only")
        vals = node.meta.get("val")
        for val in vals if isinstance(vals, (tuple, list)) else [vals]:
            if any(not isinstance(size, int) for size in getattr(val, "shape", ())):
                raise RecipeError(
                    f"model '{p.name}': the shape of {_torch_op(node)[1]}'s result{where} "
                    f"depends on the values of its input ({list(val.shape)}); pimbuild needs "
                    f"every extent to be a compile-time constant")
            if getattr(val, "dtype", torch.float32).is_complex:
                raise RecipeError(
                    f"model '{p.name}': {_torch_op(node)[1]}{where} computes a "
                    f"{dtype_name(val.dtype)} tensor; the lowered program has no complex "
                    f"tensors")


def _reject_random_ops(p: ModelParams, prog: ExportedProgram) -> None:
    """A forward that draws random numbers (an op PyTorch tags ``nondeterministic_seeded``:
    rand, randn, bernoulli, dropout in training mode, ...) is refused before it is lowered:
    the lowered program has its own generator, so it could never agree with eager."""
    for node in prog.graph.nodes:
        tags = getattr(node.target, "tags", ()) if node.op == "call_function" else ()
        if torch.Tag.nondeterministic_seeded in tags:
            raise RecipeError(
                f"model '{p.name}': the forward draws random numbers ({_torch_op(node)[1]}"
                f"{_where(node)}), so its lowered program cannot match PyTorch eager; pass the "
                f"random tensor as an input instead")


def _reject_dynamic_dims(p: ModelParams, prog: ExportedProgram, names: list[str]) -> None:
    user_inputs = prog.graph_signature.user_inputs
    placeholders = {n.name: n for n in prog.graph.nodes if n.op == "placeholder"}
    for input_name, node_name in zip(names, user_inputs, strict=False):
        val = placeholders[node_name].meta.get("val")
        for dim, size in enumerate(getattr(val, "shape", ())):
            if not isinstance(size, int):
                raise RecipeError(
                    f"model '{p.name}': input '{input_name}' has a dynamic dimension {dim} "
                    f"({size}); pimbuild needs every extent to be a compile-time constant")


def _torch_op(node: torch.fx.Node) -> tuple[str, str]:
    """(node name, target) of the operator the model was written with, before
    decomposition: ``layer_norm`` for the ``var_mean`` a LayerNorm decomposes into."""
    sources = node.meta.get("from_node") or []
    if not sources:
        return node.name, str(node.target)
    src = sources[0]
    while src.from_node:
        src = src.from_node[0]
    return src.name, str(src.target)


def _module_path(node: torch.fx.Node) -> str:
    """The path of the submodule whose forward holds ``node`` ('' for the model itself)."""
    stack = node.meta.get("nn_module_stack") or {}
    return list(stack.values())[-1][0] if stack else ""


def _where(node: torch.fx.Node) -> str:
    """`` in '<submodule>'`` for messages, or nothing for the model's own forward."""
    path = _module_path(node)
    return f" in '{path}'" if path else ""


def nonnegative_scatter_dims(gm: torch.fx.GraphModule) -> int:
    """Write the scatter family's negative ``dim`` (``scatter(-1, ...)``, a mixture of experts'
    top-k routing) as the same dimension counted from the front: torch-mlir's TorchToLinalg
    crashes (SIGSEGV or SIGABRT) on a negative one (seen at -1 and -2 on 2-D and 3-D
    tensors; counted from the front, the same ops lower). Returns how many it rewrote."""
    rewritten = 0
    for node in gm.graph.nodes:
        name = getattr(node.target, "_schema", None) and node.target._schema.name
        if node.op != "call_function" or name not in SCATTERS:
            continue
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        rank = len(node.args[0].meta["val"].shape)
        if isinstance(dim, int) and dim < 0 and rank:
            if len(node.args) > 1:
                node.update_arg(1, dim + rank)
            else:
                node.update_kwarg("dim", dim + rank)
            rewritten += 1
    if rewritten:
        gm.recompile()
    return rewritten


def fold_splat_constants(prog: ExportedProgram) -> int:
    """Compute, with PyTorch, every tensor the forward builds from constants alone (factories
    such as ``ones``, ``full`` and ``arange``, tensor literals, and ops on them), and write each
    one whose elements are all equal as one ``aten.full``. torch-mlir folds ops on such
    splat constants itself, and some of its folders are wrong: ``torch.ones(4) == 1`` became
    False (so ``cosine_embedding_loss`` with a target of ones was 0), ``sign`` of ones -1,
    ``remainder`` of -7 by 3 -1 (PyTorch: 2), ``-7 // 2`` -2^63; on ``sign`` of zeros and on
    an int constant compared with a float it crashed. Returns how many it wrote."""
    gm = prog.graph_module
    constants = {spec.arg.name: prog.constants[spec.target]
                 for spec in prog.graph_signature.input_specs
                 if spec.kind.name == "CONSTANT_TENSOR" and spec.target in prog.constants}
    values: dict[torch.fx.Node, Any] = {}
    for node in gm.graph.nodes:
        if node.op == "placeholder" and node.name in constants:
            values[node] = constants[node.name]
        elif (node.op == "call_function" and all(n in values for n in node.all_input_nodes)
              and not isinstance(node.target, torch._ops.HigherOrderOperator)):
            args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), values.__getitem__)
            try:
                values[node] = node.target(*args, **kwargs)
            except Exception:  # eager computed it; if this call cannot, torch-mlir folds it
                continue
    folded = 0
    for node, value in values.items():
        fill = _splat(value)
        if node.op != "call_function" or node.target is torch.ops.aten.full.default \
                or fill is None:
            continue
        with gm.graph.inserting_before(node):
            full = gm.graph.call_function(torch.ops.aten.full.default, (list(value.shape), fill),
                                          {"dtype": value.dtype, "device": value.device})
        full.meta = dict(node.meta)
        node.replace_all_uses_with(full)
        folded += 1
    if folded:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return folded


def _splat(value: Any) -> bool | int | float | None:
    """The one value every element of the tensor ``value`` has (NaN, and the sign of a zero,
    included), or None."""
    if not isinstance(value, torch.Tensor) or value.numel() == 0 or value.dtype.is_complex:
        return None
    first = value.flatten()[0]
    same = value == first
    if value.dtype.is_floating_point:
        same = (same | value.isnan() & first.isnan()) & (value.signbit() == first.signbit())
    return first.item() if bool(same.all()) else None


SCATTERS = {"aten::scatter", "aten::scatter_add", "aten::scatter_reduce"}


def annotate_sources(gm: torch.fx.GraphModule) -> None:
    """Rewrite each node's stack trace so its MLIR location names its source:
    ``File "<module path>|<torch op>#<torch node>|<aten op>", line <i>,`` (the torch op the
    model wrote, and the aten op it decomposed into)."""
    for i, node in enumerate(gm.graph.nodes):
        if node.op != "call_function":
            continue
        path = _module_path(node)
        name, op = _torch_op(node)
        node.meta["stack_trace"] = f'File "{path}|{op}#{name}|{node.target}", line {i}, in x\n'


def signature(prog: ExportedProgram, recipe: recipes.Recipe, outputs: list[torch.Tensor],
              weights: str, layout: list[str | None] | None = None) -> dict[str, Any]:
    """The lowered function's arguments in order, each with where its value comes from; its
    results (``outputs``, in ``layout``'s order); the state it carries to the next forward:
    the recipe's ``state`` and every buffer the forward writes in place (by name, the index
    of the result holding its new value: found by torch.export, not declared)."""
    layout = layout or [None] * len(outputs)
    written = {slot: i for i, slot in enumerate(layout) if slot is not None}
    sig = prog.graph_signature
    user = dict(zip(sig.user_inputs, recipe.inputs, strict=True))
    args = []
    for spec in sig.input_specs:
        name = spec.arg.name
        if name in user:
            kind, source = "input", user[name]
        elif weights == "constants":
            continue  # parameters are folded into the IR
        else:
            kind, source = spec.kind.name.lower(), spec.target
        val = next(n for n in prog.graph.nodes if n.name == name).meta["val"]
        args.append({"name": name, "kind": kind, "source": source,
                     "shape": list(val.shape), "dtype": dtype_name(val.dtype)})
        if kind == "constant_tensor" and _lookup(recipe.module, source) is None:
            args[-1]["value"] = _literal(prog, source)
    outs = [{"shape": list(o.shape), "dtype": dtype_name(o.dtype)}
            for o in outputs]
    return {"function": FUNC_NAME, "args": args, "outputs": outs, "layers": recipe.layers,
            "tokens": recipe.tokens, "unit": recipe.unit,
            "forwards_per_request": recipe.forwards_per_request, "prompt": recipe.prompt,
            "carry": {k: _shifted(v, layout) for k, v in recipe.carry.items()},
            "state": {**{k: _shifted(v, layout) for k, v in recipe.state.items()}, **written},
            "cast": recipe.cast, "evaluated": recipe.evaluated,
            "mutations": written}


LITERAL_MAX = 4096  # elements of a tensor literal kept in signature.json


def _literal(prog: ExportedProgram, name: str) -> list:
    """A tensor the forward builds from a literal (``torch.tensor([0, 3, 5])``): torch.export
    lifts it as an argument that no module attribute holds, so its value is kept in the
    signature for the stages that rebuild the arguments."""
    return prog.constants[name].tolist()


def _shifted(user_index: int, layout: list[str | None]) -> int:
    """The index among all results of the forward's output ``user_index``."""
    user = [i for i, slot in enumerate(layout) if slot is None]
    if not 0 <= user_index < len(user):
        raise RecipeError(f"the recipe's carry or state names output {user_index}, but the "
                          f"forward returns {len(user)} output(s)")
    return user[user_index]


def import_program(prog: ExportedProgram, weights: str):
    from torch_mlir.extras.fx_importer import FxImporter

    from pimbuild import mlir

    importer = FxImporter(context=mlir.new_context())
    if weights == "constants":
        # the importer looks for every buffer in state_dict; a non-persistent one is held in
        # constants ("Could not find state mapping for buffer")
        for name in prog.graph_signature.buffers:
            if name not in prog.state_dict and name in prog.constants:
                prog.state_dict[name] = prog.constants[name]
        importer.import_frozen_program(prog, func_name=FUNC_NAME)
    else:
        importer.import_stateless_graph(prog.graph_module.graph, func_name=FUNC_NAME)
    return importer.module


def import_error(p: ModelParams, prog: ExportedProgram, e: Exception) -> RecipeError:
    """torch-mlir's importer failed on the exported program. When the graph holds a
    higher-order operator (torch.cond, while_loop, scan, map: control flow as subgraphs),
    say so: the importer has no lowering for most of them, and its message for one may be a
    bare KeyError."""
    from torch._ops import HigherOrderOperator

    hops = [n for n in prog.graph.nodes
            if n.op == "call_function" and isinstance(n.target, HigherOrderOperator)]
    hint = ""
    if hops:
        hint = (f"; the forward uses torch.ops.higher_order.{hops[0].target.name()}"
                f"{_where(hops[0])}, control flow pimbuild cannot lower: compute both "
                f"branches and select with torch.where, or unroll a loop of fixed trip count "
                f"in Python")
    return RecipeError(f"model '{p.name}' cannot be imported by torch-mlir: {first_line(e)}"
                       f"{hint}")


_LAST_MATERIALIZED: dict[str, tuple[list[np.ndarray], list[np.ndarray], recipes.Recipe]] = {}


def materialize(p: ModelParams, sig: dict[str, Any]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Rebuild the lowered function's arguments and PyTorch eager's outputs from the recipe.

    The last result is kept for the process: the stages of one build and the jobs of a sweep
    ask for the same arguments again (a decoder layer's 200M random weights cost seconds).
    Callers only read them: no lowered program writes its inputs (extract records writes,
    and none goes to an input argument)."""
    return _materialized(p, sig)[:2]


def materialized_recipe(p: ModelParams, sig: dict[str, Any]) -> recipes.Recipe:
    """The recipe ``materialize``'s arguments were taken from (its inputs and buffers are
    the arrays it returned): to time eager on the same tensors. A forward of it must keep
    the buffers (``kept_buffers``)."""
    return _materialized(p, sig)[2]


def _materialized(p: ModelParams, sig: dict[str, Any]
                  ) -> tuple[list[np.ndarray], list[np.ndarray], recipes.Recipe]:
    key = json.dumps([dataclasses.asdict(p), sig["args"]], sort_keys=True)
    if key not in _LAST_MATERIALIZED:
        _LAST_MATERIALIZED.clear()
        _LAST_MATERIALIZED[key] = _materialize(p, sig)
    return _LAST_MATERIALIZED[key]


def keep_recipe(p: ModelParams, recipe: recipes.Recipe) -> None:
    """Hand a recipe ``lower`` built to the next ``materialize`` of the same model in this
    process, so a cold build constructs the model (a decoder layer's 200M random weights:
    1.6 s) once, not twice. Used once, then dropped; at most ``KEEP`` are held (calibrate
    lowers its own kernels between a model's lower and profile)."""
    _KEPT_RECIPE[_key(p)] = recipe
    while len(_KEPT_RECIPE) > KEEP:
        _KEPT_RECIPE.pop(next(iter(_KEPT_RECIPE)))


def _key(p: ModelParams) -> str:
    return json.dumps(dataclasses.asdict(p), sort_keys=True)


KEEP = 3
_KEPT_RECIPE: dict[str, recipes.Recipe] = {}


def _materialize(p: ModelParams, sig: dict[str, Any]
                 ) -> tuple[list[np.ndarray], list[np.ndarray], recipes.Recipe]:
    recipe = _KEPT_RECIPE.pop(_key(p), None) or build_recipe(p)
    layout = _results_layout(sig)
    expected = [o.detach().numpy() for o in eager(p, recipe, layout)]
    values = []
    for arg in sig["args"]:
        if "value" in arg:  # a literal of the forward (``_literal``)
            values.append(np.array(arg["value"], dtype=np.dtype(arg["dtype"])
                                   ).reshape(arg["shape"]))
            continue
        tensor = (recipe.inputs[arg["source"]] if arg["kind"] == "input"
                  else _attribute(recipe.module, arg["source"]))
        values.append(np.ascontiguousarray(_real_view(tensor).detach().numpy()))
    return values, expected, recipe


def _results_layout(sig: dict[str, Any]) -> list[str | None]:
    """``eager``'s ``layout`` of the lowered function's results, from ``signature.json``: a
    written buffer's name where its new value is returned, else None."""
    layout: list[str | None] = [None] * len(sig["outputs"])
    for name, i in sig.get("mutations", {}).items():
        layout[i] = name
    return layout


def reference64(p: ModelParams, sig: dict[str, Any]) -> list[np.ndarray] | None:
    """Eager's results of the model run in float64 on the same weights and inputs (the
    recipe built again in ``model.dtype``, then widened): the referee of ``check.judge``.
    Float results come back as float64, others as they are; None where the forward cannot
    run in float64 (an op without a float64 kernel, a dtype it insists on)."""
    layout = _results_layout(sig)
    try:
        recipe = build_recipe(p)
        recipe.module = recipe.module._apply(functools.partial(_cast, dtype=torch.float64))
        recipe.inputs = {k: _cast(v, torch.float64) for k, v in recipe.inputs.items()}
        outputs = eager(p, recipe, layout)
    except (RecipeError, RuntimeError, MemoryError):  # no float64 kernel, no room for it
        return None
    return [o.detach().to(torch.float64).numpy() if o.is_floating_point()
            else o.detach().numpy() for o in outputs]


def _lookup(module: torch.nn.Module, path: str) -> Any:
    """The module's attribute at a dotted path, or None where it has none."""
    try:
        return functools.reduce(getattr, path.split("."), module)
    except AttributeError:
        return None


def _attribute(module: torch.nn.Module, path: str) -> torch.Tensor:
    """A parameter, buffer or tensor attribute the export lifted, by its dotted path."""
    tensor = _lookup(module, path)
    if tensor is None:
        raise RecipeError(f"the exported program takes '{path}' as an argument, but the "
                          f"module has no such attribute (a tensor created inside forward? "
                          f"make it a buffer)")
    return tensor
