"""The recipe: build it (with its size checked), its declarations, its inputs' dtypes, the
floats it would be cast from, the layers left in training mode."""

from __future__ import annotations

import functools
import inspect
import numbers
from collections import Counter
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils import _pytree as pytree

from pimbuild import recipes
from pimbuild.core.errors import ConfigError, RecipeError, first_line

if TYPE_CHECKING:
    from pimbuild.core.stage import ModelParams


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
        recipe = builder(**arguments(p))
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
    scalars_as_tensors(recipe)
    recipe.inputs = {k: _cast(v, dtype) for k, v in recipe.inputs.items()}
    _reject_input_dtypes(p, recipe)
    return recipe


# A Python scalar output, as the 0-d tensor that holds its value exactly (numpy's scalars
# count as the Python type they register as).
SCALAR_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float64}


def scalar_kind(value: Any) -> type | None:
    """``bool``, ``int`` or ``float`` for a Python (or numpy) scalar of that kind, else None."""
    if isinstance(value, torch.Tensor):
        return None
    if isinstance(value, bool | np.bool_):
        return bool
    if isinstance(value, numbers.Integral):
        return int
    if isinstance(value, numbers.Real):
        return float
    return None


def scalars_as_tensors(recipe: recipes.Recipe) -> None:
    """Make the module return each Python scalar (``bool``, ``int``, ``float``) among its
    outputs as a 0-d tensor, recording which in ``recipe.scalars``: its class becomes a
    subclass, of the same name, whose ``forward`` converts them (and returns the results
    untouched when there are none), so that eager, torch.export and every stage see one
    forward, and the parameters keep their names."""
    cls, seen = type(recipe.module), recipe.scalars

    @functools.wraps(cls.forward)  # its signature: torch.export names the inputs from it
    def forward(self, *args, **kwargs):
        out = super(wrapped, self).forward(*args, **kwargs)
        kinds = [scalar_kind(v) for v in pytree.tree_leaves(out)]
        if not any(kinds):
            return out
        seen.update({i: kind.__name__ for i, kind in enumerate(kinds) if kind})
        return pytree.tree_map(lambda v: torch.tensor(kind(v), dtype=SCALAR_DTYPES[kind])
                               if (kind := scalar_kind(v)) else v, out)

    wrapped = type(cls.__name__, (cls,), {"forward": forward, "__module__": cls.__module__,
                                          "__qualname__": cls.__qualname__})
    try:
        recipe.module.__class__ = wrapped
    except TypeError:  # a class whose instances cannot change class: its outputs stay as they are
        pass


def arguments(p: ModelParams) -> dict[str, Any]:
    """The builder's keyword arguments: ``model.size``, and ``hf`` where the model has it."""
    return {**p.size, **({"hf": p.hf} if p.hf else {})}


def _check_size(p: ModelParams, builder) -> None:
    """A ConfigError where ``model.size`` does not fit the builder's parameters (an
    unknown or a missing one); a TypeError the builder raises itself is the recipe's."""
    try:
        signature = inspect.signature(builder)
    except (TypeError, ValueError):  # no signature to read (a C function): the call says
        return
    try:
        signature.bind(**arguments(p))
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
    from pimbuild.frontend.mlir import NP_DTYPES

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


def _real_view(value: Any) -> Any:
    """A complex tensor as ``torch.view_as_real`` of it, as the lowered program takes and
    returns it (``complexes.real_pairs``); anything else as it is."""
    if isinstance(value, torch.Tensor) and value.is_complex():
        return torch.view_as_real(value.resolve_conj())
    return value
