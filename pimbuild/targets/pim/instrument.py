"""Stage ``instrument``: marker calls around every candidate nest, then the LLVM dialect.

``region_enter(id)`` / ``region_exit(id)`` (declared ``func.func private``, provided by the
marker runtime) wrap each top-level ``scf.parallel`` that extract numbered ``id``, and the
whole function body (``FORWARD_REGION``). Host code generation (``lowering.register_block``,
``pimbuild.codegen.blocking``) runs before the LLVM dialect. Writes ``instrumented.mlir``
(scf level),
``llvm.mlir`` and ``forward.o`` (the object file the MLIR ExecutionEngine produces from it,
for the host CPU).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from pimbuild.codegen.runtime import LIBRARY, Markers
from pimbuild.core.errors import StageError
from pimbuild.core.stage import Inputs
from pimbuild.targets.pim.hostfacts import resolved_block

if TYPE_CHECKING:
    from torch_mlir import ir

NAME = "instrument"
READS = ("lower", "extract", "runtime", "calibrate")
WRITES = ("instrumented.mlir", "llvm.mlir", "forward.o", "codegen.json")
ENTER, EXIT = "region_enter", "region_exit"
# The whole function body is a region of its own: the forward time that coverage divides by.
FORWARD_REGION = 8191  # PIM_MAX_REGIONS - 1 in markers.c


@dataclass(frozen=True)
class Params:
    register_block: int | None  # lowering.register_block: rows per reduction loop (1 = off;
    # None: the one calibrate chose on this host)


def params(cfg: DictConfig) -> Params:
    return Params(register_block=cfg.lowering.register_block)


def insert_markers(module: ir.Module, function: str, n_candidates: int) -> int:
    """Wrap every top-level nest of ``function`` in marker calls; returns how many."""
    from torch_mlir import ir

    from pimbuild.codegen.loops import find_nests
    from pimbuild.frontend import mlir

    func = mlir.function(module, function)
    nests = [op for op, _ in find_nests(func.regions[0].blocks[0])]
    if len(nests) != n_candidates:
        raise StageError(NAME, f"scf.mlir has {len(nests)} nests but candidates.json "
                               f"lists {n_candidates}")
    if n_candidates >= FORWARD_REGION:
        raise StageError(NAME, f"{n_candidates} nests: the marker runtime holds "
                               f"{FORWARD_REGION - 1} at most")
    for ident, op in enumerate(nests):
        ops = [o.operation for o in op.block.operations]
        after = ops[ops.index(op) + 1]
        with ir.InsertionPoint(op):
            mlir.call_marker(ENTER, ident, op.location)
        with ir.InsertionPoint(after):
            mlir.call_marker(EXIT, ident, op.location)
    body = func.regions[0].blocks[0]
    first = body.operations[0].operation
    with ir.InsertionPoint(first):
        mlir.call_marker(ENTER, FORWARD_REGION, first.location)
    terminator = body.operations[len(body.operations) - 1].operation
    with ir.InsertionPoint(terminator):
        mlir.call_marker(EXIT, FORWARD_REGION, terminator.location)
    for name in (ENTER, EXIT):
        mlir.declare(module, name)
    return len(nests)


def nest_marks(module: ir.Module, attribute: str) -> dict[int, int]:
    """Nest id -> the integer ``attribute`` code generation set on one of its
    ``scf.parallel`` ops (``blocking.ROWS_ATTR``: the rows it jammed or ran innermost;
    ``panels.COLUMNS_ATTR``: the columns of its panels), the id read from the
    ``region_enter`` call before the nest."""
    from torch_mlir import ir

    from pimbuild.codegen.relayout import COPY_ATTR
    from pimbuild.frontend import mlir

    found = {}
    for op in mlir.walk(module.operation):
        if op.name != "scf.parallel" or attribute not in op.attributes:
            continue
        top = op
        while top.parent.operation.name != "func.func":
            top = top.parent.operation
        ops = [o.operation for o in top.block.operations]
        for prev in reversed(ops[:ops.index(top)]):
            if prev.name in ("arith.constant", "memref.alloc") or COPY_ATTR in prev.attributes:
                continue  # bounds, panels (``panels``) and copies (``relayout``) code
                # generation placed before it
            if prev.name == "func.call" and \
                    ir.FlatSymbolRefAttr(prev.attributes["callee"]).value == ENTER:
                ident = ir.IntegerAttr(prev.operands[0].owner.attributes["value"]).value
                found[ident] = ir.IntegerAttr(op.attributes[attribute]).value
            break
    return found


def generate(module, block: int, stage: str, failure_dir: Path
             ) -> tuple[dict[str, int], dict[int, int], dict[int, int]]:
    """Host code generation of a marked module (``jit.to_llvm``): what it rewrote, and per
    nest id the rows it jammed or ran innermost and the columns of its panels, read while
    the loops are still loops (``nest_marks``)."""
    from pimbuild.codegen import blocking, jit, panels

    rows: dict[int, int] = {}
    columns: dict[int, int] = {}

    def marks(m) -> None:
        rows.update(nest_marks(m, blocking.ROWS_ATTR))
        columns.update(nest_marks(m, panels.COLUMNS_ATTR))

    done = jit.to_llvm(module, block, stage=stage, failure_dir=failure_dir, inspect=marks)
    return done, rows, columns


def instrument(scf_path: Path, candidates_path: Path, runtime_lib: Path, block: int,
               out: Path, failure_dir: Path) -> None:
    from pimbuild.codegen import jit
    from pimbuild.frontend import mlir

    candidates = json.loads(candidates_path.read_text())
    module = mlir.parse_file(scf_path)
    insert_markers(module, candidates["function"], len(candidates["candidates"]))
    mlir.write_ir(module, out / "instrumented.mlir")
    done, rows, columns = generate(module, block, NAME, failure_dir)
    (out / "codegen.json").write_text(json.dumps(
        {"register_block": block, **done, "rows": {str(k): v for k, v in sorted(rows.items())},
         "panel_columns": {str(k): v for k, v in sorted(columns.items())}},
        indent=2) + "\n")
    mlir.write_ir(module, out / "llvm.mlir")
    jit.write_object(module, Markers(runtime_lib).symbols([ENTER, EXIT]), out / "forward.o")


def run(inputs: Inputs, p: Params, out: Path) -> None:
    instrument(inputs["lower"] / "scf.mlir", inputs["extract"] / "candidates.json",
               inputs["runtime"] / LIBRARY,
               resolved_block(p.register_block, inputs["calibrate"]), out, inputs.failure_dir)
