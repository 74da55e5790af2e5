"""Outlining for reinsert: offloaded nests become functions, segments get boundary calls.

Consecutive offloaded nests form segments. Every offloaded nest is outlined into its own
function ``@<prefix><id>`` (attribute ``pimbuild.target = "<device>"``; its buffers become
arguments, its constants are cloned in), called from where it was; each segment is bracketed
by ``<begin>(segment)`` / ``<end>(segment)`` calls, the boundaries a downstream toolchain takes
over. Names come from the target's ``Boundary``.
"""

from __future__ import annotations

from torch_mlir import ir

from pimbuild.codegen.bounds import executions
from pimbuild.codegen.loops import find_nests, scopes
from pimbuild.frontend import mlir
from pimbuild.targets.offload.copymodels import runs
from pimbuild.targets.offload.protocol import Boundary


def outline(module: ir.Module, nest: ir.Operation, ident: int, boundary: Boundary) -> str:
    """Move ``nest`` into a new function and call it from where it was; returns its name."""
    name = f"{boundary.outline_prefix}{ident}"
    free = mlir.free_values(nest)
    constants = [v for v in free if not isinstance(v.owner, ir.Block)
                 and v.owner.operation.name == "arith.constant"]
    args = [v for v in free if not any(v == c for c in constants)]
    with ir.InsertionPoint.at_block_begin(module.body), nest.location:
        func = ir.Operation.create("func.func", regions=1, attributes={
            "sym_name": ir.StringAttr.get(name),
            "function_type": ir.TypeAttr.get(ir.FunctionType.get([a.type for a in args], [])),
            "sym_visibility": ir.StringAttr.get("private"),
            mlir.TARGET: ir.StringAttr.get(boundary.device),
            "pimbuild.nest": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), ident)})
    with nest.location:
        block = func.regions[0].blocks.append(*[a.type for a in args])
        with ir.InsertionPoint(block):
            ret = ir.Operation.create("func.return")
    with ir.InsertionPoint(nest):
        mlir.call(name, args, nest.location)
    nest.move_before(ret)
    mapping = list(zip(args, block.arguments, strict=True))
    with ir.InsertionPoint(nest):
        for c in constants:
            mapping.append((c, c.owner.operation.clone().result))
    for op in [nest, *mlir.walk(nest)]:
        for old, new in mapping:
            op.replace_uses_of_with(old, new)
    return name


def reinsert(module: ir.Module, function: str, offloaded: set[int],
             boundary: Boundary) -> tuple[list[list[int]], int]:
    """Outline the offloaded nests and mark the segments (consecutive offloaded nests of one
    scope, ``copymodels.runs``); returns the segments (nest ids) and the host<->device
    transitions a forward makes through them (two per run of a segment)."""
    func = mlir.function(module, function)
    found = list(find_nests(func.regions[0].blocks[0]))
    nests = [op for op, _ in found]
    segments = runs(list(enumerate(scopes(nests))), offloaded)
    transitions = 2 * sum(executions(found[seg[0]][1]) for seg in segments)
    ops = dict(enumerate(nests))
    for s, seg in enumerate(segments):
        first, last = ops[seg[0]], ops[seg[-1]]
        after = [o.operation for o in last.block.operations]
        following = after[after.index(last) + 1]
        with ir.InsertionPoint(first):
            mlir.call_marker(boundary.begin, s, first.location)
        with ir.InsertionPoint(following):
            mlir.call_marker(boundary.end, s, last.location)
        for ident in seg:
            outline(module, ops[ident], ident, boundary)
    if segments:
        for name in (boundary.begin, boundary.end):
            mlir.declare(module, name)
    return segments, transitions
