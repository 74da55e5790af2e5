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

import itertools
import math
from collections import Counter
from pathlib import Path
from typing import Any

from torch_mlir import ir

from pimbuild.codegen.bounds import (
    MAX_POINTS,
    bounds,
    enclosing_loops,
    index_value,
    owner,
    points,
    trip_counts,
)
from pimbuild.frontend import mlir

VIEW_OPS = frozenset({"memref.expand_shape", "memref.collapse_shape", "memref.subview",
                      "memref.cast", "memref.reinterpret_cast", "memref.view",
                      "memref.transpose"})
ELEMENT_BYTES = {"f64": 8, "f32": 4, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i16": 2,
                 "i8": 1, "i1": 1, "index": 8}


def view_root(memref: ir.Value) -> ir.Value:
    """The buffer a memref value is a view of: an allocation, a global or an argument. A
    loop-carried memref (an ``scf.for``'s ``iter_args`` inside it, its result after it) is
    the buffer it starts as."""
    while True:
        defining = owner(memref)
        if isinstance(defining, ir.Block):
            number, loop = ir.BlockArgument(memref).arg_number, defining.owner
            loop = loop.operation if loop is not None else None
            if loop is None or loop.name != "scf.for" or number == 0:
                return memref
            memref = loop.operands[2 + number]  # iter_arg k: init operand k (after lb, ub, step)
        elif defining.name == "scf.for":
            memref = defining.operands[3 + ir.OpResult(memref).result_number]
        elif defining.name in VIEW_OPS:
            memref = defining.operands[0]
        else:
            return memref


def memref_bytes(t: ir.Type, sizes: list[int] | None = None) -> tuple[list[int], str, int]:
    """Shape, element type and bytes of a memref type; ``sizes``: the values of its dynamic
    dimensions, in order (a dynamic one without counts as 0 bytes)."""
    mt = ir.MemRefType(t)
    element = str(mt.element_type)
    given = iter(sizes or [])
    shape = [d if not mt.is_dynamic_dim(i) else next(given, 0) for i, d in enumerate(mt.shape)]
    return shape, element, math.prod(shape) * ELEMENT_BYTES.get(element, 4)


def largest_sizes(alloc: ir.Operation) -> list[int]:
    """The dynamic sizes of an allocation at their largest over the iterations of the loops
    around it (a buffer sized by a triangular loop's bound: its first, largest one)."""
    sizes = list(alloc.operands)
    if not sizes:
        return []
    largest = [0] * len(sizes)
    for count, env in enumerate(points(enclosing_loops(alloc))):
        if count >= MAX_POINTS:
            raise ValueError(f"an allocation's size varies over more than {MAX_POINTS} "
                             f"iterations of the loops around it")
        largest = [max(m, index_value(v, env)) for m, v in zip(largest, sizes, strict=True)]
    return largest


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
                          "", largest_sizes(op))
                k += 1
            elif op.name == "memref.get_global":
                name = str(op.attributes["name"]).lstrip("@")
                self._add(self._key(op.results[0]), f"global:{name}", op.results[0].type,
                          "global", name)

    @staticmethod
    def _key(value: ir.Value) -> Any:
        defining = owner(value)
        if isinstance(defining, ir.Block):  # the function's argument, or another block's
            entry = defining.owner is not None and defining.owner.operation.name == "func.func"
            return ("arg", ir.BlockArgument(value).arg_number) if entry else (value,)
        return (defining, ir.OpResult(value).result_number)

    def _add(self, key: Any, ident: str, t: ir.Type, role: str, name: str,
             sizes: list[int] | None = None) -> None:
        shape, element, nbytes = memref_bytes(t, sizes)
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


def _body_stats(block: ir.Block, weight: int, mix: Counter, accesses: list,
                env: dict[Any, int] | None = None) -> int:
    """Accumulate op mix and memory accesses of ``block`` executed ``weight`` times per
    parallel iteration; return innermost-body executions per parallel iteration. ``env``:
    the values of induction variables the bounds of its loops are computed from; an inner
    loop whose bounds depend on the loop around it (``for j in range(i)``) is counted one
    iteration of that loop at a time."""
    inner = 0
    for op in block.operations:
        op = op.operation
        if op.name == "scf.for":
            inner += _for_stats(op, weight, mix, accesses, env or {})
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
                inner += _body_stats(b, weight, mix, accesses, env)
    return max(inner, 1)


def _for_stats(op: ir.Operation, weight: int, mix: Counter, accesses: list,
               env: dict[Any, int]) -> int:
    """``_body_stats`` of an ``scf.for``: its body's times its trips, or, where a loop inside
    takes its bounds from its induction variable, the sum over its iterations."""
    body = op.regions[0].blocks[0]
    trips = trip_counts(op, env)[0]
    once, seen = Counter(), []
    try:
        inner = _body_stats(body, weight * trips, once, seen, env)
    except ValueError:
        lb, ub, step = bounds(op, env)[0]
        if trips > MAX_POINTS:
            raise
        inner, once, seen = 0, Counter(), []  # what the failed walk counted is dropped
        for i in range(lb, ub, step):  # the accesses once, the op mix of every iteration
            inner += _body_stats(body, weight, once, [] if seen else seen,
                                 {**env, body.arguments[0]: i})
        mix.update(once)
        accesses.extend(seen)
        return inner
    mix.update(once)
    accesses.extend(seen)
    return trips * inner


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
    bytes, by what it addresses in the buffer (``addressed``), so that two nests reading the
    two halves of one buffer are told apart, and two reading it through views of different
    shapes over the same bytes are not."""
    views: dict[str, dict[str, int]] = {}
    whole = set()
    for kind, value, _ in accesses:
        if kind != "read":
            continue
        name = allocs.resolve(value)
        if _whole_read(value, op):
            whole.add(name)
            continue
        key = addressed(ir.MemRefType(value.type))
        views.setdefault(name, {})[key] = memref_bytes(value.type)[2]
    return {name: seen for name, seen in views.items() if name not in whole}


def addressed(t: ir.MemRefType) -> str:
    """What a view addresses in its buffer: a dense view (its elements one contiguous run)
    by that run, ``offset:count``, whatever its shape (``64x1x4096`` and ``64x4096`` of one
    buffer are the same bytes); any other by its element offset, shape and strides."""
    strides, offset = t.get_strides_and_offset()
    run = 1
    for stride, n in sorted((s, n) for n, s in zip(t.shape, strides, strict=True) if n != 1):
        if stride != run:
            return f"{offset}:{'x'.join(map(str, t.shape))}:{','.join(map(str, strides))}"
        run *= n
    return f"{offset}:{run}"


def counts(op: ir.Operation, loops: list[ir.Operation]) -> dict[str, Any]:
    """The nest's iteration counts, op mix and accesses. With constant bounds: ``dims``,
    ``n_iter`` and ``n_total`` of one invocation, ``enclosing`` invocations. Where its
    bounds, or an inner loop's, are computed from an enclosing loop's induction variable (a
    triangular loop) or from its own: each invocation's exact (n_iter, n_total) in
    ``per_invocation``, ``dims`` at their largest, and the means per invocation."""
    body = op.regions[0].blocks[0]
    mix: Counter = Counter()
    accesses: list = []
    try:
        dims = trip_counts(op)
        n_iter = math.prod(dims)
        n_total = n_iter * _body_stats(body, 1, mix, accesses)
        enclosing = math.prod(math.prod(trip_counts(loop)) for loop in loops)
        return {"dims": dims, "n_iter": n_iter, "n_total": n_total, "enclosing": enclosing,
                "mix": mix, "accesses": accesses, "per_invocation": None}
    except ValueError:
        mix, accesses = Counter(), []
    per, dims, walked = [], [], itertools.count(1)
    for env in points(loops):
        d = trip_counts(op, env)
        dims = [max(a, b) for a, b in itertools.zip_longest(dims, d, fillvalue=0)]
        n_iter, once, seen = math.prod(d), Counter(), []
        _within(next(walked))
        try:  # one walk of the body serves every parallel iteration
            n_total = n_iter * _body_stats(body, 1, once, seen, env)
            once = Counter({k: v * n_iter for k, v in once.items()})
        except ValueError:  # an inner loop's bounds come from the nest's own induction variables
            n_total, once, seen = 0, Counter(), []
            for inner_env in points([op], env):
                _within(next(walked))
                n_total += _body_stats(body, 1, once, [] if seen else seen, inner_env)
        mix.update(once)
        accesses = accesses or seen
        per.append((n_iter, n_total))
    iters = sum(n for n, _ in per)
    mix = Counter({k: v / max(iters, 1) for k, v in mix.items()})
    return {"dims": dims, "n_iter": mean(n for n, _ in per), "n_total": mean(t for _, t in per),
            "enclosing": len(per), "mix": mix, "accesses": accesses, "per_invocation": per}


def _within(walks: int) -> None:
    if walks > MAX_POINTS:
        raise ValueError(f"the nest's bounds vary over more than {MAX_POINTS} iteration "
                         f"points; pimbuild counts at most that many")


def mean(values) -> int | float:
    """The mean of integers: an int where it is one, else a float."""
    values = list(values)
    total = sum(values)
    return total // len(values) if values and total % len(values) == 0 else \
        (total / len(values) if values else 0)


def analyze(op: ir.Operation, ident: int, loops: list[ir.Operation], allocs: Allocations
            ) -> dict:
    c = counts(op, loops)
    dims, mix, accesses, enclosing = c["dims"], c["mix"], c["accesses"], c["enclosing"]
    reads, writes = {}, {}
    for kind, value, _ in accesses:
        alloc = allocs.resolve(value)
        (reads if kind == "read" else writes)[alloc] = allocs.table.get(alloc, {}).get("bytes", 0)
    moved = {**reads, **writes}
    varying = {} if c["per_invocation"] is None else {
        "per_invocation": [list(pair) for pair in c["per_invocation"]],
        "bounds": "vary with an enclosing loop (triangular): n_iter and n_total are the "
                  "means per invocation, exact over the forward"}
    return {
        "id": ident,
        **source_of(op),
        "parallel_dims": dims,
        "n_iter": c["n_iter"],
        "n_total": c["n_total"],
        "enclosing_trips": enclosing,
        **varying,
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


def find_nests(block: ir.Block, loops: tuple[ir.Operation, ...] = ()):
    """Yield ``(scf.parallel op, the scf.for loops around it)`` for every top-level parallel
    nest."""
    for op in block.operations:
        op = op.operation
        if op.name == "scf.parallel":
            yield op, list(loops)
            continue
        around = (*loops, op) if op.name == "scf.for" else loops
        for region in op.regions:
            for b in region.blocks:
                yield from find_nests(b, around)


def scopes(nests: list[ir.Operation]) -> list[str]:
    """Where each nest sits: "" in the function's body, else ``<op>#<k>`` naming the op
    around it (the k-th distinct one, in program order: ``scf.for#0``). Consecutive nests of
    one scope can form one host<->device segment; nests of two cannot."""
    around: list[ir.Operation] = []
    names = []
    for op in nests:
        parent = op.parent.operation
        if parent.name == "func.func":
            names.append("")
            continue
        k = next((i for i, seen in enumerate(around) if seen == parent), None)
        if k is None:
            k, around = len(around), [*around, parent]
        names.append(f"{parent.name}#{k}")
    return names


def extract(scf_path: Path, signature: dict[str, Any]) -> dict[str, Any]:
    module = mlir.parse_file(scf_path)
    func = next(op.operation for op in module.body.operations
                if op.operation.name == "func.func"
                and ir.StringAttr(op.operation.attributes["sym_name"]).value
                == signature["function"])
    allocs = Allocations(func, signature)
    nests = list(find_nests(func.regions[0].blocks[0]))
    candidates = [analyze(op, i, enc, allocs) for i, (op, enc) in enumerate(nests)]
    for c, scope in zip(candidates, scopes([op for op, _ in nests]), strict=True):
        if scope:  # inside a loop (or another op): its own segments
            c["scope"] = scope
    return {"function": signature["function"], "allocations": allocs.table,
            "candidates": candidates}

