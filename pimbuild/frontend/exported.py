"""Export at fixed shapes, the classes of program refused by class (``_reject_*``), the
rewrites before import (scatter dims, splat constants), each node's source annotated, and
``signature.json``."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch
from torch.export import ExportedProgram

from pimbuild import recipes
from pimbuild.core.errors import RecipeError
from pimbuild.frontend.decompose import decompositions
from pimbuild.frontend.recipe import FUNC_NAME, dtype_name
from pimbuild.frontend.run import _lookup

if TYPE_CHECKING:
    from pimbuild.core.stage import ModelParams


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

        hint = (" (the forward's control flow, or a Python number it computes: .item(), "
                "float(t), depends on a tensor's values; pimbuild needs one static graph: keep "
                "such a value a tensor)" if isinstance(e, GuardOnDataDependentSymNode) else "")
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
    from pimbuild.frontend import complexes

    try:
        complexes.real_pairs(prog, table)
    except complexes.NoRule as e:
        what = ("the forward" if e.node.op in ("output", "placeholder")
                else f"{_torch_op(e.node)[1]}{_where(e.node)}")
        raise RecipeError(f"model '{p.name}': {what} {e} (pimbuild computes complex tensors "
                          f"as pairs of real ones: pimbuild/frontend/complexes.py)") from None


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
            "mutations": written,
            **({"scalars": [{"output": i, "type": t} for i, t in sorted(recipe.scalars.items())]}
               if recipe.scalars else {})}


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
