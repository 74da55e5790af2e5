"""Stage ``reinsert``: the hybrid program.

Consecutive PIM nests form segments. Every PIM nest is outlined into its own function
``@pim_nest_<id>`` (attribute ``pimbuild.target = "pim"``; its buffers become arguments, its
constants are cloned in), called from where it was; each segment is bracketed by
``pim_offload_begin(segment)`` / ``pim_offload_end(segment)``, the boundaries a downstream PIM
toolchain takes over. The hybrid program is compiled and run on the host with those markers
and must match PyTorch eager; its transitions are counted (``N_region``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from torch_mlir import ir

from pimbuild import jit, lower, mlir
from pimbuild.errors import StageError
from pimbuild.extract import find_nests
from pimbuild.runtime import Markers

BEGIN, END = "pim_offload_begin", "pim_offload_end"
RTOL = 1e-5


def _inside(value: ir.Value, root: ir.Operation) -> bool:
    """Is ``value`` defined within ``root`` (a result of a nested op or a nested block arg)?"""
    owner = value.owner
    op = owner.owner if isinstance(owner, ir.Block) else owner.operation
    while op is not None:
        if op == root:
            return True
        parent = op.parent
        op = parent.operation if parent is not None else None
    return False


def _free_values(root: ir.Operation) -> list[ir.Value]:
    free: list[ir.Value] = []
    for op in [root, *mlir.walk(root)]:
        for v in op.operands:
            if not _inside(v, root) and not any(v == f for f in free):
                free.append(v)
    return free


def _declare(module: ir.Module, name: str) -> None:
    with ir.InsertionPoint.at_block_begin(module.body), ir.Location.unknown(module.context):
        i64 = ir.IntegerType.get_signless(64)
        ir.Operation.create("func.func", regions=1, attributes={
            "sym_name": ir.StringAttr.get(name),
            "function_type": ir.TypeAttr.get(ir.FunctionType.get([i64], [])),
            "sym_visibility": ir.StringAttr.get("private")})


def _call(name: str, operands: list[ir.Value], loc: ir.Location) -> None:
    with loc:
        ir.Operation.create("func.call", operands=operands,
                            attributes={"callee": ir.FlatSymbolRefAttr.get(name)})


def _marker(name: str, segment: int, loc: ir.Location) -> None:
    with loc:
        i64 = ir.IntegerType.get_signless(64)
        c = ir.Operation.create("arith.constant", results=[i64],
                                attributes={"value": ir.IntegerAttr.get(i64, segment)})
    _call(name, [c.result], loc)


def outline(module: ir.Module, nest: ir.Operation, ident: int) -> str:
    """Move ``nest`` into a new function and call it from where it was; returns its name."""
    name = f"pim_nest_{ident}"
    free = _free_values(nest)
    constants = [v for v in free if not isinstance(v.owner, ir.Block)
                 and v.owner.operation.name == "arith.constant"]
    args = [v for v in free if not any(v == c for c in constants)]
    with ir.InsertionPoint.at_block_begin(module.body), nest.location:
        func = ir.Operation.create("func.func", regions=1, attributes={
            "sym_name": ir.StringAttr.get(name),
            "function_type": ir.TypeAttr.get(ir.FunctionType.get([a.type for a in args], [])),
            "sym_visibility": ir.StringAttr.get("private"),
            "pimbuild.target": ir.StringAttr.get("pim"),
            "pimbuild.nest": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), ident)})
    with nest.location:
        block = func.regions[0].blocks.append(*[a.type for a in args])
        with ir.InsertionPoint(block):
            ret = ir.Operation.create("func.return")
    with ir.InsertionPoint(nest):
        _call(name, args, nest.location)
    nest.move_before(ret)
    mapping = list(zip(args, block.arguments, strict=True))
    with ir.InsertionPoint(nest):
        for c in constants:
            mapping.append((c, c.owner.operation.clone().result))
    for op in [nest, *mlir.walk(nest)]:
        for old, new in mapping:
            op.replace_uses_of_with(old, new)
    return name


def reinsert(module: ir.Module, function: str, pim: set[int]) -> list[list[int]]:
    """Outline the PIM nests and mark the segments; returns the segments (nest ids)."""
    func = next(op.operation for op in module.body.operations
                if ir.StringAttr(op.operation.attributes["sym_name"]).value == function)
    nests = [op for op, _ in find_nests(func.regions[0].blocks[0])]
    segments: list[list[int]] = []
    for ident in sorted(pim):
        if segments and segments[-1][-1] == ident - 1:
            segments[-1].append(ident)
        else:
            segments.append([ident])
    ops = dict(enumerate(nests))
    for s, seg in enumerate(segments):
        first, last = ops[seg[0]], ops[seg[-1]]
        after = [o.operation for o in last.block.operations]
        following = after[after.index(last) + 1]
        with ir.InsertionPoint(first):
            _marker(BEGIN, s, first.location)
        with ir.InsertionPoint(following):
            _marker(END, s, last.location)
        for ident in seg:
            outline(module, ops[ident], ident)
    if segments:
        for name in (BEGIN, END):
            _declare(module, name)
    return segments


def check(engine, markers: Markers, signature: dict, args: list[np.ndarray],
          expected: list[np.ndarray]) -> dict:
    markers.reset()
    results = jit.invoke(engine, signature["function"], args, signature["outputs"])
    errors = []
    for got, want in zip(results, expected, strict=True):
        scale = max(float(np.abs(want).max()), 1e-30)
        errors.append(float(np.abs(got - want).max()) / scale)
    return {"max_rel_error": max(errors, default=0.0), "rtol": RTOL,
            "transitions": markers.transitions()}


def run(scf_path: Path, signature_path: Path, decisions_path: Path, runtime_lib: Path,
        lp: lower.LowerParams, out_dir: Path, failure_dir: Path) -> None:
    signature = json.loads(signature_path.read_text())
    pim = set(json.loads(decisions_path.read_text())["offloaded"])
    module = mlir.parse_file(scf_path)
    segments = reinsert(module, signature["function"], pim)
    mlir.write_ir(module, out_dir / "hybrid.mlir")
    jit.to_llvm(module, lp.register_block, stage="reinsert", failure_dir=failure_dir)
    markers = Markers(runtime_lib)
    (out_dir / "hybrid_llvm.mlir").write_text(mlir.asm(module) + "\n")
    engine = jit.write_object(module, markers.symbols, out_dir / "hybrid.o")
    args, expected = lower.materialize(lp, signature)
    result = check(engine, markers, signature, args, expected)
    report = {"segments": segments, "n_region": 2 * len(segments),
              "outlined": sorted(pim), "check": result}
    (out_dir / "reinsert.json").write_text(json.dumps(report, indent=2) + "\n")
    if result["max_rel_error"] > RTOL:
        raise StageError("reinsert", f"the hybrid program differs from PyTorch eager: max "
                                     f"relative error {result['max_rel_error']:.3g} > {RTOL}")
    if result["transitions"] != report["n_region"]:
        raise StageError("reinsert", f"the hybrid program made {result['transitions']} "
                                     f"host<->PIM transitions, expected {report['n_region']}")
