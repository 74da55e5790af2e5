"""The partitioned program: every kernel of ``linalg.mlir`` as its own function, so that a
worker can run exactly the kernels placed on its device (docs/design.md §10).

``kernel_<id>`` takes the buffers the kernel reads (function arguments ``arg<i>`` and other
kernels' results ``k<j>.<n>``, the names of ``kernels.json``) and returns its results. What
launches nothing (views, ``tensor.empty``, the merged init fills, constants) is cloned into
each kernel function that needs it. The module is then bufferized and compiled like the
forward (results become out-parameters).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch_mlir import ir

from pimbuild.frontend import mlir
from pimbuild.targets.gpus.program import kernels

# MLIR element types -> the numpy dtype names of ``pimbuild.frontend.mlir.NP_DTYPES``.
DTYPES = {"f32": "float32", "f64": "float64", "i64": "int64", "i32": "int32", "i16": "int16",
          "i8": "int8", "ui8": "uint8", "i1": "bool"}


def _roots_and_slice(op: ir.Operation, names: dict[Any, str]
                     ) -> tuple[list[ir.Value], list[ir.Operation]]:
    """The named buffers ``op`` depends on and the unnamed ops between them and ``op``
    (views, empties, fills, constants), in program order."""
    roots: list[ir.Value] = []
    sliced: list[ir.Operation] = []
    seen: set[Any] = set()

    def visit(value: ir.Value) -> None:
        if value in seen:
            return
        seen.add(value)
        if value in names:
            roots.append(value)
            return
        owner = value.owner.operation
        for operand in mlir.free_values(owner):
            visit(operand)
        if owner not in sliced:
            sliced.append(owner)

    for operand in mlir.free_values(op):
        visit(operand)
    order = {o: i for i, o in enumerate(_program_order(op))}
    return roots, sorted(sliced, key=lambda o: order.get(o, -1))


def _program_order(op: ir.Operation) -> list[ir.Operation]:
    block = op.parent.regions[0].blocks[0] if op.parent.name == "func.func" else None
    return [o.operation for o in block.operations] if block is not None else []


def build(linalg_path: Path, signature: dict[str, Any]) -> tuple[ir.Module, list[dict]]:
    """A module of ``kernel_<id>`` functions and, per kernel, the buffers it takes and
    returns: ``{"id", "function", "args": [names], "results": [names]}``."""
    module = kernels.generalized(linalg_path)
    func = mlir.function(module, signature["function"])
    _, ops = kernels.scan(func)
    names: dict[Any, str] = {}
    block = func.regions[0].blocks[0]
    for i, arg in enumerate(block.arguments):
        names[arg] = f"arg{i}"
    for ident, op in enumerate(ops):
        for n, result in enumerate(op.results):
            names[result] = f"k{ident}.{n}"
    out = ir.Module.create(ir.Location.unknown(module.context))
    specs = []
    for ident, op in enumerate(ops):
        roots, sliced = _roots_and_slice(op, names)
        name = f"kernel_{ident}"
        with module.context, ir.Location.unknown():
            ftype = ir.FunctionType.get([v.type for v in roots], [r.type for r in op.results])
            with ir.InsertionPoint(out.body):
                fn = ir.Operation.create("func.func", regions=1, attributes={
                    "sym_name": ir.StringAttr.get(name),
                    "function_type": ir.TypeAttr.get(ftype)})
            entry = fn.regions[0].blocks.append(*[v.type for v in roots])
            mapping = {v: entry.arguments[i] for i, v in enumerate(roots)}
            with ir.InsertionPoint(entry):
                for o in [*sliced, op]:
                    clone = o.clone()
                    for i, operand in enumerate(clone.operands):
                        new = mapping.get(operand)
                        if new is not None:
                            clone.operands[i] = new
                    _remap_regions(clone, mapping)
                    for old, new in zip(o.results, clone.results, strict=True):
                        mapping[old] = new
                ir.Operation.create("func.return", operands=list(clone.results))
        specs.append({"id": ident, "function": name,
                      "args": [names[v] for v in roots],
                      "results": [names[r] for r in op.results],
                      "outputs": [{"shape": list(r.type.shape),
                                   "dtype": DTYPES[str(r.type.element_type)]}
                                  for r in op.results]})
    return out, specs


def _remap_regions(op: ir.Operation, mapping: dict[Any, ir.Value]) -> None:
    """Operands of nested ops that captured values from outside point at the clones."""
    for region in op.regions:
        for block in region.blocks:
            for inner in block.operations:
                inner = inner.operation
                for i, operand in enumerate(inner.operands):
                    new = mapping.get(operand)
                    if new is not None:
                        inner.operands[i] = new
                _remap_regions(inner, mapping)
