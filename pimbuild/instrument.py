"""Stage ``instrument``: marker calls around every candidate nest, then the LLVM dialect.

``region_enter(id)`` / ``region_exit(id)`` (declared ``func.func private``, provided by the
marker runtime) wrap each top-level ``scf.parallel`` that extract numbered ``id``. Writes
``instrumented.mlir`` (scf level), ``llvm.mlir`` and ``forward.o`` (the object file the MLIR
ExecutionEngine produces from it, for the host CPU).
"""

from __future__ import annotations

import json
from pathlib import Path

from torch_mlir import ir

from pimbuild import jit, mlir
from pimbuild.errors import StageError
from pimbuild.extract import find_nests
from pimbuild.runtime import Markers

ENTER, EXIT = "region_enter", "region_exit"
# The whole function body is a region of its own: the forward time that coverage divides by.
FORWARD_REGION = 8191  # PIM_MAX_REGIONS - 1 in markers.c


def _declare(module: ir.Module, name: str) -> None:
    with ir.InsertionPoint.at_block_begin(module.body), ir.Location.unknown(module.context):
        i64 = ir.IntegerType.get_signless(64)
        func_type = ir.TypeAttr.get(ir.FunctionType.get([i64], []))
        ir.Operation.create("func.func", regions=1, attributes={
            "sym_name": ir.StringAttr.get(name), "function_type": func_type,
            "sym_visibility": ir.StringAttr.get("private")})


def _call(name: str, ident: int, loc: ir.Location) -> None:
    with loc:
        i64 = ir.IntegerType.get_signless(64)
        const = ir.Operation.create("arith.constant", results=[i64],
                                    attributes={"value": ir.IntegerAttr.get(i64, ident)})
        ir.Operation.create("func.call", operands=[const.result],
                            attributes={"callee": ir.FlatSymbolRefAttr.get(name)})


def _next_op(op: ir.Operation) -> ir.Operation:
    ops = [o.operation for o in op.block.operations]
    return ops[ops.index(op) + 1]


def insert_markers(module: ir.Module, function: str, n_candidates: int) -> int:
    """Wrap every top-level nest of ``function`` in marker calls; returns how many."""
    func = next(op.operation for op in module.body.operations
                if ir.StringAttr(op.operation.attributes["sym_name"]).value == function)
    nests = [op for op, _ in find_nests(func.regions[0].blocks[0])]
    if len(nests) != n_candidates:
        raise StageError("instrument", f"scf.mlir has {len(nests)} nests but candidates.json "
                                       f"lists {n_candidates}")
    if n_candidates >= FORWARD_REGION:
        raise StageError("instrument", f"{n_candidates} nests: the marker runtime holds "
                                       f"{FORWARD_REGION - 1} at most")
    for ident, op in enumerate(nests):
        after = _next_op(op)
        with ir.InsertionPoint(op):
            _call(ENTER, ident, op.location)
        with ir.InsertionPoint(after):
            _call(EXIT, ident, op.location)
    body = func.regions[0].blocks[0]
    first = body.operations[0].operation
    with ir.InsertionPoint(first):
        _call(ENTER, FORWARD_REGION, first.location)
    terminator = body.operations[len(body.operations) - 1].operation
    with ir.InsertionPoint(terminator):
        _call(EXIT, FORWARD_REGION, terminator.location)
    for name in (ENTER, EXIT):
        _declare(module, name)
    return len(nests)


def run(scf_path: Path, candidates_path: Path, runtime_lib: Path, register_block: int,
        out_dir: Path, failure_dir: Path) -> None:
    candidates = json.loads(candidates_path.read_text())
    module = mlir.parse_file(scf_path)
    insert_markers(module, candidates["function"], len(candidates["candidates"]))
    mlir.write_ir(module, out_dir / "instrumented.mlir")
    jit.to_llvm(module, register_block, stage="instrument", failure_dir=failure_dir)
    mlir.write_ir(module, out_dir / "llvm.mlir")
    jit.write_object(module, Markers(runtime_lib).symbols, out_dir / "forward.o")
