"""Host code generation: packed panels of the operand a vector register tile loads
(``vectile``), where its rows run innermost (docs/design.md §1).

A tile of ``x @ W`` with ``W`` stored (K, N) loads, for its block of ``width`` columns
``j .. j + width``, the vectors ``W[k, j .. j + width]`` for every ``k``: one or two cache
lines 4 * N bytes apart. When the rows run innermost, every block of rows loads that same
panel again, and at N = 256 its 256 lines fall in 4 of a 32 KiB L1's 64 sets, so (by that
arithmetic; no counters here to show it) every block reads it from the L2. oneDNN packs B
for this reason; here each panel is copied once per block of columns into a contiguous
buffer (``K x width`` floats) that the blocks of rows then read in order. ``nn.Linear``'s
weight, stored (N, K), has no such vectors at all: ``W[j .. j + width, k]`` is one element
of each of ``width`` rows. ``vectile`` tiles it all the same (``TRANSPOSED``), leaving
stand-in loads that only its panel, copied element by element, makes true; it does so only
where ``shares`` says ``pack`` will pack them all.

``pack`` rewrites a tiled nest ``scf.parallel (.., j, i)`` (the rows ``i`` innermost) into
one whose row dimension runs once, and whose body copies the panels and then runs the rows
in an ``scf.for``: each vector is the same sum of the same products, only loaded from the
copy. The panel is one buffer allocated before the nest (on the heap: up to
``PANEL_BYTES`` a nest, and a model may have hundreds; the deallocation pipeline of
``jit.SCF_TO_LLVM`` frees it after the nest), shared by the nest's iterations, which host
code runs one after another. It packs a load when its address moves with the columns by one
along one index (``j + c``, ``c`` constant), does not move with the rows, moves with the
reduction loops (from 0 by 1), and the panel it reads is not already contiguous; and only
where at least ``ROW_BLOCKS`` blocks of rows share the copy (``TRANSPOSED_ROW_BLOCKS`` for
a transposed one) and the panels fit in ``PANEL_BYTES``. Where x, the operand the rows
read, is past ``ROW_BLOCK_BYTES`` and the panels are small, the rows run in blocks outside
the blocks of columns (``_block_rows``), so that a block of x stays in cache while every
block of columns reads it. Measured: docs/measurements/unseen_models_epyc.md (packed panels,
blocks of rows).
"""

from __future__ import annotations

import math

from torch_mlir import ir
from torch_mlir.dialects import memref, scf, vector

from pimbuild.codegen.blocking import add, clone, constant, depends, index_constant, slope, swap
from pimbuild.codegen.bounds import owner, trip_counts
from pimbuild.frontend import mlir

ROW_BLOCKS = 8  # blocks of rows that read each panel, at least (the copy is one more read)
# and for a transposed panel (W[j, k], copied element by element), at least: below it the
# register blocking of codegen was faster (nn.Linear 1024 x 1024, 64 rows: 1.04x its time,
# 96 rows: 0.91x, 32 rows: 1.43x; docs/measurements/unseen_models_epyc.md)
TRANSPOSED_ROW_BLOCKS = 24
PANEL_BYTES = 1024 * 1024  # the panels of one block of columns, at most (an L2's worth)
PANELS_ATTR = "pimbuild.panels"  # on a nest given panels: how many
COLUMNS_ATTR = "pimbuild.panel_columns"  # and the columns of each (the footprint backend's)
TRANSPOSED_ATTR = "pimbuild.transposed"  # on vectile's stand-in for W[j, k]'s vector
ROW_BLOCKS_ATTR = "pimbuild.row_blocks"  # on a nest given panels: its blocks of rows
# x (the operand the rows read) past ROW_BLOCK_BYTES runs in blocks of rows of at most that,
# each read by every block of columns while it stays in cache (a fraction of an L3; oneDNN
# blocks its rows likewise), where the panels of a block of columns fit ROW_BLOCK_PANEL_BYTES
# (under half a Zen 3 L2). Each block of rows copies the panels again. nn.Linear, A/B on the
# AMD EPYC VM (docs/measurements/unseen_models_epyc.md): x of 25 MB, K = 768 and 1536 (panels
# of 74 and 147 KiB) ran in 0.82 and 0.89-0.93 of the time; K = 3072, 4096 and 6144 (256-590
# KiB) in 1.02, 1.03 and 1.26, so they are not blocked; x of 12.6 MB, K = 1536: 0.99.
ROW_BLOCK_BYTES = 8 * 1024 * 1024
ROW_BLOCK_PANEL_BYTES = 192 * 1024


def pack(parallel: ir.Operation, column: int, row: int, width: int,
         row_bytes: int = 0) -> int:
    """Pack the panels of a tiled nest whose dimension ``row`` (the innermost) runs its
    blocks of rows and ``column`` its blocks of ``width`` columns; returns how many panels
    it gave the nest (0: the nest is left as it was). ``row_bytes``: the bytes of the
    operand the rows read (x), which ``_block_rows`` splits where it is past
    ``ROW_BLOCK_BYTES``."""
    body = parallel.regions[0].blocks[0]
    ivs = list(body.arguments)
    n = len(ivs)
    lb, ub, step = (constant(parallel.operands[k * n + row]) for k in range(3))
    nests = [op.operation for op in body.operations if op.operation.name == "scf.for"]
    if None in (lb, ub, step) or (ub - lb) // step < ROW_BLOCKS or len(nests) != 1 \
            or not _top_level(parallel):
        return 0
    loops = _chain(nests[0])
    groups = _groups(parallel, loops, ivs[column], ivs[row], width)
    shapes = {key: _shape(deps, width) for key, (deps, _) in groups.items()}
    if not groups or not _fits(shapes.values()):
        return 0
    loc = parallel.location
    row_loop = _run_rows(parallel, row, (lb, ub, step), loc)
    here = ir.InsertionPoint(row_loop)
    for key, (deps, loads) in groups.items():
        with loc:
            kind = ir.MemRefType.get(shapes[key], ir.F32Type.get())
            panel = memref.AllocOp(kind, [], [], ip=ir.InsertionPoint(parallel)).result
        _copy(panel, deps, loads, ivs, row_loop, here, loc)
        for load, offset, _ in loads:
            _redirect(load, panel, [loop.regions[0].blocks[0].arguments[0] for loop in deps],
                      offset, loc)
    small = sum(math.prod(shape) for shape in shapes.values()) * 4 <= ROW_BLOCK_PANEL_BYTES
    batches = _trips(parallel, _x_dims(parallel, row_loop, (row, column)))
    blocks = _row_blocks(row_bytes // batches, (ub - lb) // step) if small else 1
    if blocks > 1:
        _block_rows(parallel, row, column, row_loop, (lb, ub, step), blocks, loc)
    i64 = ir.IntegerType.get_signless(64)
    parallel.attributes[PANELS_ATTR] = ir.IntegerAttr.get(i64, len(groups))
    parallel.attributes[COLUMNS_ATTR] = ir.IntegerAttr.get(i64, width)
    parallel.attributes[ROW_BLOCKS_ATTR] = ir.IntegerAttr.get(i64, blocks)
    return len(groups)


def _x_dims(parallel: ir.Operation, row_loop: ir.Operation, skip: tuple[int, int]
            ) -> list[int]:
    """The dimensions of ``parallel`` (but ``skip``) that the rows' operand, x, is read at:
    those the addresses of its loads (scalars the tile broadcasts; the accumulators and the
    panels are vectors) move with (attention's heads), not those only the columns run (a QKV
    projection's columns split into heads)."""
    iv = row_loop.regions[0].blocks[0].arguments[0]
    ivs = parallel.regions[0].blocks[0].arguments
    index = [i for op in mlir.walk(row_loop) if op.name == "memref.load"
             for i in [list(op.operands)[1:]] if any(depends(v, iv) for v in i)]
    return [k for k in range(len(ivs)) if k not in skip
            and any(depends(v, ivs[k]) for i in index for v in i)]


def _trips(parallel: ir.Operation, dims: list[int]) -> int:
    """Iterations of ``parallel``'s dimensions ``dims`` together (attention's heads: x is
    read a head at a time); 1 where a bound is not a constant."""
    try:
        trips = trip_counts(parallel)
    except ValueError:
        return 1
    return math.prod(trips[k] for k in dims)


def _row_blocks(row_bytes: int, tiles: int) -> int:
    """How many blocks the rows run in: the fewest that divide the ``tiles`` (blocks of rows
    of the register tile) and hold at most ``ROW_BLOCK_BYTES`` of x each (1: x fits)."""
    blocks = 1
    while row_bytes / blocks > ROW_BLOCK_BYTES and blocks < tiles:
        blocks = next(b for b in range(blocks + 1, tiles + 1) if tiles % b == 0)
    return blocks


def _block_rows(parallel: ir.Operation, row: int, column: int, row_loop: ir.Operation,
                bounds: tuple[int, int, int], blocks: int, loc: ir.Location) -> None:
    """Run ``row_loop`` (the rows ``bounds``) in ``blocks`` blocks, a new outer dimension of
    ``parallel`` in place of ``row``'s single iteration, outside the blocks of columns: each
    block of x then stays in cache while every block of columns reads it."""
    lb, ub, step = bounds
    per_block = (ub - lb) // blocks
    before = ir.InsertionPoint(parallel)
    n = len(parallel.regions[0].blocks[0].arguments)
    parallel.operands[n + row] = index_constant(blocks, before, loc)
    block = parallel.regions[0].blocks[0].arguments[row]
    here = ir.InsertionPoint(row_loop)
    size = index_constant(per_block, here, loc)
    with here, loc:
        first = ir.Operation.create("arith.muli", results=[ir.IndexType.get()],
                                    operands=[block, size]).result
    start = add(first, lb, here, loc) if lb else first
    row_loop.operands[0], row_loop.operands[1] = start, add(start, per_block, here, loc)
    swap(parallel, row, column)


def row_blocks(parallel: ir.Operation) -> int:
    """The blocks of rows ``pack`` ran the nest in (1 where it did not block them)."""
    if ROW_BLOCKS_ATTR not in parallel.attributes:
        return 1
    return ir.IntegerAttr(parallel.attributes[ROW_BLOCKS_ATTR]).value


def standins(parallel: ir.Operation) -> int:
    """How many of ``vectile``'s stand-ins for ``W[j, k]``'s vectors are left in the nest
    (``pack`` replaces them all; any left would read the wrong elements)."""
    return sum(TRANSPOSED_ATTR in op.attributes for op in mlir.walk(parallel))


def packed(module: ir.Module) -> int:
    """How many nests of ``module`` ``pack`` gave panels."""
    return sum(PANELS_ATTR in op.attributes for op in mlir.walk(module.operation)
               if op.name == "scf.parallel")


def shares(parallel: ir.Operation, loops: list[ir.Operation], column: int, row: int,
           width: int, blocks: int) -> bool:
    """Whether ``pack`` will give the nest (before ``vectile`` tiles it: ``loops`` its
    reduction loops) panels once its ``blocks`` blocks of rows run innermost with ``width``
    columns: ``vectile`` then runs them innermost even where x is large (each block of
    columns reads x once, and x's elements serve ``width`` columns each where W's would
    serve a block of rows)."""
    ivs = parallel.regions[0].blocks[0].arguments
    if blocks < ROW_BLOCKS or not _top_level(parallel):
        return False
    groups: dict = {}
    for op in [o.operation for o in loops[-1].regions[0].blocks[0].operations]:
        if op.name != "memref.load":
            continue
        index = list(op.operands)[1:]
        found = _packable(op, parallel, loops, ivs[column], ivs[row], width)
        if found is None:
            if any(depends(i, ivs[column]) for i in index[:-1]):
                return False  # W[j, k] that no panel holds: vectile cannot tile it
            continue
        deps, _, at = found
        if at != len(index) - 1 and blocks < TRANSPOSED_ROW_BLOCKS:
            return False
        groups[(op.operands[0], *index[:at], *index[at + 1:])] = deps
    return bool(groups) and _fits([_shape(deps, width) for deps in groups.values()])


def _top_level(parallel: ir.Operation) -> bool:
    """Whether ``parallel`` is an op of its function's body: its panels are then allocated
    once a call (inside a loop, once an iteration)."""
    return parallel.parent.name == "func.func"


def _chain(loop: ir.Operation) -> list[ir.Operation]:
    """``loop`` and the ``scf.for`` loops nested as the first op of each body."""
    loops = [loop]
    while True:
        first = loops[-1].regions[0].blocks[0].operations[0].operation
        if first.name != "scf.for":
            return loops
        loops.append(first)


def _shape(deps: list[ir.Operation], width: int) -> list[int]:
    """A panel's shape: the trips of the reduction loops its load moves with, then the
    columns."""
    return [constant(loop.operands[1]) for loop in deps] + [width]


def _fits(shapes) -> bool:
    """Whether panels of these shapes (f32) fit in ``PANEL_BYTES`` together."""
    return sum(math.prod(shape) for shape in shapes) * 4 <= PANEL_BYTES


def _groups(parallel: ir.Operation, loops: list[ir.Operation], col: ir.Value, row: ir.Value,
            width: int) -> dict:
    """The loads to pack, grouped by buffer and address but the column: key -> (the
    reduction loops the address moves with, [(load, column offset, the index that moves
    with the columns)])."""
    groups: dict = {}
    for op in [o.operation for o in loops[-1].regions[0].blocks[0].operations]:
        found = _packable(op, parallel, loops, col, row, width) \
            if op.name == "vector.load" else None
        if found is not None:
            deps, offset, at = found
            index = list(op.operands)[1:]
            key = (op.operands[0], *index[:at], *index[at + 1:])
            groups.setdefault(key, (deps, []))[1].append((op, offset, at))
    return groups


def _packable(load: ir.Operation, parallel: ir.Operation, loops: list[ir.Operation],
              col: ir.Value, row: ir.Value, width: int) -> tuple[list, int, int] | None:
    """The reduction loops ``load``'s address moves with, its column offset and the
    position of the index that moves with the columns (the last; an outer one for
    ``nn.Linear``'s ``W[j, k]``: a scalar load before ``vectile`` tiles the nest, or the
    stand-in it leaves, ``TRANSPOSED_ATTR``), where a panel can hold what it reads and would
    not be contiguous already; else None."""
    buffer, *index = load.operands
    moving = [at for at, i in enumerate(index) if depends(i, col)]
    kind = load.result.type
    lanes = ir.VectorType(kind).shape[0] if isinstance(kind, ir.VectorType) else 1
    transposed = moving != [len(index) - 1]
    if len(moving) != 1 or mlir.defined_inside(buffer, parallel) \
            or any(depends(i, row) for i in index) \
            or transposed and isinstance(kind, ir.VectorType) \
            and TRANSPOSED_ATTR not in load.attributes:
        return None
    offset = _offset(index[moving[0]], col)
    if offset is None or offset + lanes > width or lanes == 1 and offset:
        return None  # W[.., j + c] tiled reads W[.., (j + 8) + c]: past what _offset reads
    deps = [loop for loop in loops
            if any(depends(i, loop.regions[0].blocks[0].arguments[0]) for i in index)]
    if not deps or any((constant(loop.operands[0]), constant(loop.operands[2])) != (0, 1)
                       or constant(loop.operands[1]) is None for loop in deps):
        return None
    if not transposed and _contiguous_panel(load, deps[-1], width):
        return None
    return deps, offset, moving[0]


def _offset(index: ir.Value, col: ir.Value) -> int | None:
    """``c`` where ``index`` is ``col + c`` (``col`` itself: 0), else None."""
    if index == col:
        return 0
    op = owner(index)
    if isinstance(op, ir.Block) or op.name != "arith.addi" or op.operands[0] != col:
        return None
    return constant(op.operands[1])


def _contiguous_panel(load: ir.Operation, loop: ir.Operation, width: int) -> bool:
    """Whether consecutive iterations of ``loop`` load the panel's rows ``width`` elements
    apart already (attention's V with 16 columns a row, say): packing would gain nothing."""
    strides, _ = ir.MemRefType(load.operands[0].type).get_strides_and_offset()
    iv = loop.regions[0].blocks[0].arguments[0]
    slopes = [slope(i, iv) for i in list(load.operands)[1:]]
    return None not in slopes and sum(s * t for s, t in zip(slopes, strides, strict=True)) == width


def _run_rows(parallel: ir.Operation, row: int, bounds: tuple[int, int, int],
              loc: ir.Location) -> ir.Operation:
    """Dimension ``row`` of ``parallel`` set to one iteration, its ``bounds`` run by an
    ``scf.for`` that holds the body; returns that loop."""
    body = parallel.regions[0].blocks[0]
    n = len(body.arguments)
    ops = [op.operation for op in body.operations]
    here = ir.InsertionPoint(ops[0])
    lb, ub, step = (index_constant(v, here, loc) for v in bounds)
    with loc:
        loop = scf.ForOp(lb, ub, step, ip=here)
        with ir.InsertionPoint(loop.body):
            yield_op = scf.YieldOp([])
    for op in ops[:-1]:
        ir.Operation.move_before(op, yield_op.operation)
    iv = body.arguments[row]
    for use in list(iv.uses):
        use.owner.operands[use.operand_number] = loop.induction_variable
    before = ir.InsertionPoint(parallel)
    parallel.operands[row] = index_constant(0, before, loc)
    parallel.operands[n + row] = index_constant(1, before, loc)
    parallel.operands[2 * n + row] = index_constant(1, before, loc)
    return loop.operation


def _copy(panel: ir.Value, deps: list[ir.Operation], loads: list, ivs: list[ir.Value],
          row_loop: ir.Operation, here: ir.InsertionPoint, loc: ir.Location) -> None:
    """Before ``row_loop``: ``deps``' loops again, storing each load's vector to the panel
    (``panel[k.., offset]``); a transposed one's lanes one element each, read along the
    outer index that moves with the columns."""
    nest, ip = [], here
    for loop in deps:
        with loc:
            new = scf.ForOp(*list(loop.operands)[:3], ip=ip)
            with ir.InsertionPoint(new.body):
                scf.YieldOp([])
        nest.append(new)
        ip = ir.InsertionPoint(new.body.operations[0])
    mapping = {loop.regions[0].blocks[0].arguments[0]: new.induction_variable
               for loop, new in zip(deps, nest, strict=True)}
    at_k = [new.induction_variable for new in nest]
    for load, offset, at in loads:
        index = [_materialize(i, mapping, ip, row_loop) for i in list(load.operands)[1:]]
        if at == len(index) - 1:
            with ip, loc:
                value = vector.LoadOp(load.result.type, load.operands[0], index).result
                vector.StoreOp(value, panel, at_k + [index_constant(offset, ip, loc)])
            continue
        for lane in range(ir.VectorType(load.result.type).shape[0]):
            moved = index[:at] + [add(index[at], lane, ip, loc)] + index[at + 1:]
            with ip, loc:
                value = memref.LoadOp(load.operands[0], moved).result
                memref.StoreOp(value, panel, at_k + [index_constant(offset + lane, ip, loc)])


def _materialize(value: ir.Value, mapping: dict, ip: ir.InsertionPoint,
                 scope: ir.Operation) -> ir.Value:
    """``value`` computed at ``ip``: ops inside ``scope`` (the row loop) cloned with their
    operands renamed through ``mapping``."""
    if value in mapping:
        return mapping[value]
    if not mlir.defined_inside(value, scope):
        return value
    op = owner(value)
    for v in op.operands:
        _materialize(v, mapping, ip, scope)
    clone(op, mapping, ip)
    return mapping[value]


def _redirect(load: ir.Operation, panel: ir.Value, ivs: list[ir.Value], offset: int,
              loc: ir.Location) -> None:
    """``load`` replaced by the same vector loaded from ``panel[ivs.., offset]``."""
    here = ir.InsertionPoint(load)
    with loc:
        new = vector.LoadOp(load.result.type, panel,
                            [*ivs, index_constant(offset, here, loc)], ip=here).result
    load.result.replace_all_uses_with(new)
    load.erase()
