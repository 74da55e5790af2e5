"""Host code generation: an operand read across its rows, copied once so that each row's
reduction is contiguous (docs/design.md §1).

``controlled_fusion`` fuses a transpose into the reduction that reads it, so that a matmul
reads a transposed weight in place. Where the transposed tensor is an activation, the
reduction can end up reading it with one of the nest's parallel indices between two of its
reduction indices: the output projection of attention reads ``x[i, h * 128 + d]`` as
``a[h, i, d]``, so row ``i``'s 4096 terms lie in 32 pieces of 512 bytes, each a whole
``1020 x 128`` slab apart. The hardware prefetchers then restart every eight lines, and past
the L2 the nest ran at 1.9x eager's time (eager copies the transposed tensor first: 9 ms,
then its matrix product; ``docs/measurements/unseen_models_epyc.md``).

``relayout`` gives such a load the copy eager makes: before the nest (inside its markers,
so the nest's time includes it), the operand is copied into a buffer whose dimensions are
the operand's others in their order, then the reduction dimensions in the order of the
reduction loops, outermost first; the load reads the copy. Each sum adds the same products
in the same order. It copies only operands of at least ``MIN_BYTES`` (smaller ones stay in
the L2, where the order costs little), that the nest does not write and reads at least
``MIN_REUSE`` times over, and only for nests in a function's body (inside a loop the copy
would run once per iteration).
"""

from __future__ import annotations

import math

from torch_mlir import ir
from torch_mlir.dialects import memref, scf

from pimbuild.codegen import blocking, panels
from pimbuild.codegen.blocking import index_constant
from pimbuild.codegen.bounds import trip_counts
from pimbuild.codegen.loops import view_root
from pimbuild.frontend import mlir

MIN_BYTES = blocking.ROW_OPERAND_BYTES  # operands smaller than this are left as they are
# Iterations of the parallel dimensions the operand's address does not move with, at least:
# each reads the whole operand again, so the copy (one more read and a write) pays. A
# decode step's weight, read once, is left as it is.
MIN_REUSE = 8
RELAYOUT_ATTR = "pimbuild.relayout"  # on a nest given copies: how many
COPY_ATTR = "pimbuild.relayout_copy"  # on the outermost loop of a copy (before its nest)
COPY = True  # False: leave every operand as it is (``bench/codegen_ab.py relayout.COPY``)


def relayout(module: ir.Module) -> int:
    """Copy every operand ``_order`` finds a better order for; returns how many nests got
    copies."""
    if not COPY:
        return 0
    nests = [op for op in blocking.host_nests(module) if panels._top_level(op)]
    with module.context:
        return sum(_relayout(op) > 0 for op in nests)


def _relayout(parallel: ir.Operation) -> int:
    loops = blocking.reduction_loops(parallel)
    if loops is None:
        return 0
    reductions = blocking.reduction_ivs(loops)
    parallels = list(parallel.regions[0].blocks[0].arguments)
    body = [op.operation for op in loops[-1].regions[0].blocks[0].operations]
    written = _written(parallel)
    if written is None:
        return 0
    copies: dict = {}
    for load in body:
        if load.name != "memref.load" or view_root(load.operands[0]) in written \
                or mlir.defined_inside(load.operands[0], parallel):
            continue
        index = list(load.operands)[1:]
        order = _order(load.operands[0], index, parallels, reductions)
        if order is None or _reuse(parallel, index) < MIN_REUSE:
            continue
        key = (load.operands[0], tuple(order))
        if key not in copies:
            copies[key] = _copy(load.operands[0], order, parallel)
        _redirect(load, copies[key], [index[d] for d in order])
    if copies:
        i64 = ir.IntegerType.get_signless(64)
        parallel.attributes[RELAYOUT_ATTR] = ir.IntegerAttr.get(i64, len(copies))
    return len(copies)


def _written(parallel: ir.Operation) -> set[ir.Value] | None:
    """The buffers (views resolved to their allocation or argument) the nest stores to;
    None when it has an op that may write memory in another way (a call, a copy)."""
    written = set()
    for op in mlir.walk(parallel):
        if op.name in ("memref.store", "vector.store"):
            written.add(view_root(op.operands[1]))
        elif op.name == "vector.maskedstore":
            written.add(view_root(op.operands[0]))
        elif op.name.endswith(("call", "copy")) or op.name.startswith("linalg."):
            return None
    return written


def _order(buffer: ir.Value, index: list[ir.Value], parallels: list[ir.Value],
           reductions: list[ir.Value]) -> list[int] | None:
    """The copy's dimensions (positions in ``buffer``'s) where a parallel index lies between
    two reduction indices in memory order (dimensions of one element aside), else None; also
    None unless ``buffer`` is a contiguous f32 memref of at least ``MIN_BYTES`` and every
    index is an induction variable of the nest."""
    kind = ir.MemRefType(buffer.type)
    shape = list(kind.shape)
    if str(kind.element_type) != "f32" or not kind.has_static_shape \
            or math.prod(shape) * 4 < MIN_BYTES or not _contiguous(kind):
        return None
    role = {}
    for d, i in enumerate(index):
        if i in reductions:
            role[d] = "r"
        elif i in parallels:
            role[d] = "p"
        elif shape[d] != 1:
            return None
    wide = "".join(role[d] for d in range(len(shape)) if d in role and shape[d] > 1)
    if "r" not in wide or "p" not in wide.strip("p"):
        return None  # the reduction dimensions are together already
    rest = [d for d in range(len(shape)) if role.get(d) != "r"]
    by_loop = sorted((d for d in role if role[d] == "r"),
                     key=lambda d: reductions.index(index[d]))
    return rest + by_loop


def _reuse(parallel: ir.Operation, index: list[ir.Value]) -> int:
    """How many times the nest reads each element: the iterations of its parallel
    dimensions that no index of the load is (0 where a bound is not a constant)."""
    try:
        trips = trip_counts(parallel)
    except ValueError:
        return 0
    ivs = parallel.regions[0].blocks[0].arguments
    return math.prod(t for iv, t in zip(ivs, trips, strict=True) if iv not in index)


def _contiguous(kind: ir.MemRefType) -> bool:
    strides, offset = kind.get_strides_and_offset()
    return offset == 0 and strides == [math.prod(kind.shape[d + 1:])
                                       for d in range(len(kind.shape))]


def _copy(buffer: ir.Value, order: list[int], parallel: ir.Operation) -> ir.Value:
    """A new buffer with ``buffer``'s dimensions in ``order``, filled before ``parallel`` by
    loops over ``buffer`` in its own order (reads in order, as eager's copy)."""
    shape = list(ir.MemRefType(buffer.type).shape)
    here, loc = ir.InsertionPoint(parallel), parallel.location
    with loc:
        kind = ir.MemRefType.get([shape[d] for d in order], ir.F32Type.get())
        copy = memref.AllocOp(kind, [], [], ip=here).result
    zero, one = index_constant(0, here, loc), index_constant(1, here, loc)
    bounds = [index_constant(n, here, loc) for n in shape]
    ivs, ip = [], here
    for n in bounds:
        with loc:
            loop = scf.ForOp(zero, n, one, ip=ip)
            with ir.InsertionPoint(loop.body):
                scf.YieldOp([])
        if not ivs:
            loop.operation.attributes[COPY_ATTR] = ir.UnitAttr.get()
        ivs.append(loop.induction_variable)
        ip = ir.InsertionPoint(loop.body.operations[0])
    with ip, loc:
        value = memref.LoadOp(buffer, ivs).result
        memref.StoreOp(value, copy, [ivs[d] for d in order])
    return copy


def _redirect(load: ir.Operation, copy: ir.Value, index: list[ir.Value]) -> None:
    with ir.InsertionPoint(load), load.location:
        new = memref.LoadOp(copy, index).result
    load.result.replace_all_uses_with(new)
    load.erase()
