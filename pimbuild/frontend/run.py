"""Running the model eagerly: its outputs as leaves, the buffers a forward writes, the
layout of mutated inputs in the exported program."""

from __future__ import annotations

import contextlib
import functools
from typing import TYPE_CHECKING, Any

import torch
from torch.export import ExportedProgram

from pimbuild import recipes
from pimbuild.core.errors import RecipeError, first_line
from pimbuild.frontend.recipe import _real_view, dtype_name

if TYPE_CHECKING:
    from pimbuild.core.stage import ModelParams


def eager(p: ModelParams, recipe: recipes.Recipe, layout: list[str | None] | None = None
          ) -> list[torch.Tensor]:
    """Run the model in PyTorch eager mode; a forward that raises is a RecipeError. Buffers
    the forward writes in place are restored afterwards, so that the module keeps the state
    the lowered program starts from. ``layout`` (``mutation_layout``): the lowered program's
    results in order, a written buffer's name or None for the next output of the forward;
    its written buffers' new values are returned in their places."""
    from pimbuild.frontend.mlir import NP_DTYPES  # the dtypes the lowered program can return

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
