"""Loop nests of ``scf.mlir``: find the top-level ``scf.parallel`` nests and describe each.

For each nest (Torch-PIM §4.2): its source torch operator (from the MLIR location that
``lower`` planted), the parallel dimensions and ``n_iter`` (their product), ``n_total`` (every
iteration including inner sequential loops), the trip count of enclosing loops, the buffers it
reads and writes identified by allocation (``bytes`` of the whole allocation, so a buffer read
and written in place is one entry of ``moved_bytes``), and the op mix of one parallel iteration.
For the ``footprint`` counter backend's cache model: ``read_extents`` (the bytes of the views a
buffer is read through), ``outer_invariant_reads`` (the buffers the outermost parallel loop
does not address) and ``next_invariant_reads`` (those the next parallel loop does not).
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

from torch_mlir import ir

from pimbuild import mlir

VIEW_OPS = frozenset({"memref.expand_shape", "memref.collapse_shape", "memref.subview",
                      "memref.cast", "memref.reinterpret_cast", "memref.view",
                      "memref.transpose"})
ELEMENT_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i16": 2,
                 "i8": 1, "i1": 1, "index": 8}


def owner(value: ir.Value) -> ir.Operation | ir.Block:
    """The op that defines ``value`` (as an Operation, not an OpView), or its block."""
    defining = value.owner
    return defining if isinstance(defining, ir.Block) else defining.operation


def constant_index(value: ir.Value) -> int:
    defining = owner(value)
    if isinstance(defining, ir.Block) or defining.name != "arith.constant":
        raise ValueError(f"loop bound is not a constant: {value}")
    return ir.IntegerAttr(defining.attributes["value"]).value


def view_root(memref: ir.Value) -> ir.Value:
    """The buffer a memref value is a view of: an allocation, a global or an argument."""
    while not isinstance(owner(memref), ir.Block) and owner(memref).name in VIEW_OPS:
        memref = owner(memref).operands[0]
    return memref


def trip_counts(op: ir.Operation) -> list[int]:
    """Trip count of each dimension of an ``scf.parallel`` or ``scf.for`` (whose block also
    carries its ``iter_args``: one dimension)."""
    n = len(op.regions[0].blocks[0].arguments) if op.name == "scf.parallel" else 1
    ops = list(op.operands)
    lbs, ubs, steps = ops[:n], ops[n:2 * n], ops[2 * n:3 * n]
    return [max(0, -(-(constant_index(u) - constant_index(lb)) // constant_index(s)))
            for lb, u, s in zip(lbs, ubs, steps, strict=True)]


def memref_bytes(t: ir.Type) -> tuple[list[int], str, int]:
    mt = ir.MemRefType(t)
    element = str(mt.element_type)
    return list(mt.shape), element, math.prod(mt.shape) * ELEMENT_BYTES.get(element, 4)


class Allocations:
    """Names every buffer by the allocation it resolves to: ``arg<i>``, ``alloc<k>``,
    ``global:<name>``; views (subview, expand_shape, ...) resolve to their source."""

    def __init__(self, func: ir.Operation, signature: dict[str, Any]) -> None:
        self.table: dict[str, dict[str, Any]] = {}
        self._ids: dict[Any, str] = {}
        block = func.regions[0].blocks[0]
        n_args = len(signature["args"])
        for i, arg in enumerate(block.arguments):
            role, name = (("arg", signature["args"][i]["source"]) if i < n_args
                          else ("output", f"result{i - n_args}"))
            self._add(("arg", i), f"arg{i}", arg.type, role, name)
        k = 0
        for op in mlir.walk(func):
            if op.name in ("memref.alloc", "memref.alloca"):
                self._add(self._key(op.results[0]), f"alloc{k}", op.results[0].type, "alloc",
                          "")
                k += 1
            elif op.name == "memref.get_global":
                name = str(op.attributes["name"]).lstrip("@")
                self._add(self._key(op.results[0]), f"global:{name}", op.results[0].type,
                          "global", name)

    @staticmethod
    def _key(value: ir.Value) -> Any:
        defining = owner(value)
        if isinstance(defining, ir.Block):
            return ("arg", ir.BlockArgument(value).arg_number)
        return (defining, ir.OpResult(value).result_number)

    def _add(self, key: Any, ident: str, t: ir.Type, role: str, name: str) -> None:
        shape, element, nbytes = memref_bytes(t)
        self._ids[key] = ident
        self.table[ident] = {"role": role, "name": name, "shape": shape, "dtype": element,
                             "bytes": nbytes}

    def resolve(self, value: ir.Value) -> str:
        return self._ids.get(self._key(view_root(value)), "unknown")


def _op_class(name: str) -> str | None:
    if name == "memref.load":
        return "loads"
    if name == "memref.store":
        return "stores"
    if name.startswith("math."):
        return "math"
    if name.startswith("arith.") and name != "arith.constant":
        return "arith"
    if name == "func.call":
        return "calls"
    return None


def _body_stats(block: ir.Block, weight: int, mix: Counter, accesses: list) -> int:
    """Accumulate op mix and memory accesses of ``block`` executed ``weight`` times per
    parallel iteration; return innermost-body executions per parallel iteration."""
    inner = 0
    for op in block.operations:
        op = op.operation
        if op.name == "scf.for":
            trips = trip_counts(op)[0]
            inner += trips * _body_stats(op.regions[0].blocks[0], weight * trips, mix,
                                         accesses)
            continue
        cls = _op_class(op.name)
        if cls:
            mix[cls] += weight
        if op.name == "memref.load":
            accesses.append(("read", op.operands[0], op))
        elif op.name == "memref.store":
            accesses.append(("write", op.operands[1], op))
        for region in op.regions:
            for b in region.blocks:
                inner += _body_stats(b, weight, mix, accesses)
    return max(inner, 1)


def source_of(op: ir.Operation) -> dict[str, str]:
    """The torch operator (and module) a nest came from, and the aten op it lowered from."""
    m = mlir.SOURCE_LOC.search(str(op.location))
    if not m:
        return {"source_op": "<unknown>", "source_module": "", "source_node": "",
                "lowered_op": ""}
    return {"source_op": m.group(2), "source_module": m.group(1), "source_node": m.group(3),
            "lowered_op": m.group(4)}


def depends_on(value: ir.Value, iv: ir.Value, nest: ir.Operation, memo: dict) -> bool:
    """Is ``value`` computed from ``iv``, an induction variable of ``nest`` (through any ops
    inside it; a value made outside the nest cannot be)?"""
    if value == iv:
        return True
    if value not in memo:
        defining = owner(value)
        memo[value] = (not isinstance(defining, ir.Block) and mlir.defined_inside(value, nest)
                       and any(depends_on(v, iv, nest, memo) for v in defining.operands))
    return memo[value]


def outer_invariant_reads(op: ir.Operation, dims: list[int], accesses: list,
                          allocs: Allocations, skip: int = 0) -> list[str]:
    """The buffers that no load of the nest addresses with its outermost parallel dimension
    of more than one trip (in the loop order the host code keeps): every iteration of that
    loop reads the same part of them (a GEMM's weight, for each row of activations).
    ``skip``: of the dimension after that many such ones (``next_invariant_reads``)."""
    outer = [i for i, trips in enumerate(dims) if trips > 1][skip:]
    if not outer:
        return []
    iv, memo = op.regions[0].blocks[0].arguments[outer[0]], {}
    varying, invariant = set(), set()
    for kind, memref, load in accesses:
        if kind == "read":
            indexed = any(depends_on(v, iv, op, memo) for v in load.operands)
            (varying if indexed else invariant).add(allocs.resolve(memref))
    return sorted(invariant - varying)


def _whole_read(value: ir.Value, op: ir.Operation) -> bool:
    """Whether a read through ``value`` counts as reading its whole buffer: a view made
    inside the nest, or one without a static memref type, may address any of it."""
    return (mlir.defined_inside(value, op) or value.type.typeid != ir.MemRefType.static_typeid
            or not ir.MemRefType(value.type).has_static_shape)


def read_extents(op: ir.Operation, accesses: list, reads: dict[str, int],
                 allocs: Allocations) -> dict[str, int]:
    """Bytes of each buffer the nest can read: a buffer read only through views made outside
    the nest (the half of a tensor a rotary embedding negates) counts the bytes of those
    views; any other access counts the whole buffer."""
    views: dict[str, dict] = {}
    for kind, value, _ in accesses:
        if kind != "read":
            continue
        name = allocs.resolve(value)
        views.setdefault(name, {})[value] = (reads[name] if _whole_read(value, op)
                                             else memref_bytes(value.type)[2])
    return {name: min(reads[name], sum(seen.values())) for name, seen in views.items()}


def read_views(op: ir.Operation, accesses: list, allocs: Allocations
               ) -> dict[str, dict[str, int]]:
    """For each buffer the nest reads only through views made outside it: each view's
    bytes, by what it addresses (its element offset, shape and strides in the buffer), so
    that two nests reading the two halves of one buffer are told apart."""
    views: dict[str, dict[str, int]] = {}
    whole = set()
    for kind, value, _ in accesses:
        if kind != "read":
            continue
        name = allocs.resolve(value)
        if _whole_read(value, op):
            whole.add(name)
            continue
        t = ir.MemRefType(value.type)
        strides, offset = t.get_strides_and_offset()
        key = f"{offset}:{'x'.join(map(str, t.shape))}:{','.join(map(str, strides))}"
        views.setdefault(name, {})[key] = memref_bytes(value.type)[2]
    return {name: seen for name, seen in views.items() if name not in whole}


def analyze(op: ir.Operation, ident: int, enclosing: int, allocs: Allocations) -> dict:
    dims = trip_counts(op)
    mix: Counter = Counter()
    accesses: list = []
    inner = _body_stats(op.regions[0].blocks[0], 1, mix, accesses)
    reads, writes = {}, {}
    for kind, value, _ in accesses:
        alloc = allocs.resolve(value)
        (reads if kind == "read" else writes)[alloc] = allocs.table.get(alloc, {}).get("bytes", 0)
    moved = {**reads, **writes}
    n_iter = math.prod(dims)
    return {
        "id": ident,
        **source_of(op),
        "parallel_dims": dims,
        "n_iter": n_iter,
        "n_total": n_iter * inner,
        "enclosing_trips": enclosing,
        "reads": reads,
        "writes": writes,
        "read_extents": read_extents(op, accesses, reads, allocs),
        "read_views": read_views(op, accesses, allocs),
        "outer_invariant_reads": outer_invariant_reads(op, dims, accesses, allocs),
        # the same for the next dimension: what repeats when code generation runs all the
        # outer one's rows in one block (a GEMM's activations, for each block of columns)
        "next_invariant_reads": outer_invariant_reads(op, dims, accesses, allocs, skip=1),
        "moved_bytes": sum(moved.values()),
        "op_mix": {k: mix.get(k, 0) for k in ("loads", "stores", "arith", "math", "calls")},
    }


def find_nests(block: ir.Block, enclosing: int = 1):
    """Yield ``(scf.parallel op, enclosing trip count)`` for every top-level parallel nest."""
    for op in block.operations:
        op = op.operation
        if op.name == "scf.parallel":
            yield op, enclosing
            continue
        trips = math.prod(trip_counts(op)) if op.name == "scf.for" else 1
        for region in op.regions:
            for b in region.blocks:
                yield from find_nests(b, enclosing * trips)


def extract(scf_path: Path, signature: dict[str, Any]) -> dict[str, Any]:
    module = mlir.parse_file(scf_path)
    func = next(op.operation for op in module.body.operations
                if op.operation.name == "func.func"
                and ir.StringAttr(op.operation.attributes["sym_name"]).value
                == signature["function"])
    allocs = Allocations(func, signature)
    nests = find_nests(func.regions[0].blocks[0])
    candidates = [analyze(op, i, enc, allocs) for i, (op, enc) in enumerate(nests)]
    return {"function": signature["function"], "allocations": allocs.table,
            "candidates": candidates}

