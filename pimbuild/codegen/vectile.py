"""Host code generation: register tiles of vectors for reduction nests whose output columns
are contiguous (the instrument stage, docs/design.md §1; README, `lowering.register_block`).

A convolution (``out[f, oh, ow] += in[c, oh s + kh, ow s + kw] w[f, c, kh, kw]``), ``x @ W``
with ``W`` stored (K, N) (``out[i, j] += x[i, k] W[k, j]``) and attention's probabilities x V
have one thing in common: along the innermost output dimension (the *column*, ``ow`` or
``j``) every operand is either the same (``w[f, c, kh, kw]``, ``x[i, k]``) or read at an
address that moves by a constant stride ``s`` (1 or 2) along its innermost dimension. So
``LANES`` columns can be computed as one vector: the first kind broadcast, the second a
vector load (every other lane of a longer load at ``s = 2``).

``tile`` gives such a nest a tile of ``rows x VECTORS`` vectors of accumulators that stay in
registers through the whole reduction, as oneDNN's direct convolution keeps its output
block, and writes them once at the end. The columns are the accumulator's innermost index
(``_column``), moved to the innermost dimension if they are not there (linalg runs a
depthwise convolution's channels innermost); a row of columns that 8 does not divide ends in
a masked vector (``_lanes``). The *rows* are an outer output dimension that some vector load
does not move with (a convolution's output channels ``f``: the input's vector is loaded once
for all of them; the rows of ``x``: ``W``'s is), so each vector loaded serves every row of
the tile; else one that some broadcast does not move with. Before this,
``blocking.interchange`` ran these nests with the accumulators in memory, loaded and stored
once per ``blocking.TERMS`` terms (or, for a convolution, whose innermost reduction loop has
7, 3 or 1 trips, once per term), and ``blocking.register_block`` as scalars. Each sum adds
its terms in the same order as before.

It runs first (``jit.to_llvm``); the nests it tiles no longer have the form the other two
look for. Which nests it tiles, and only those, is the business of ``_plan``: anything in
the innermost reduction body that is not a load, an accumulator's store, index arithmetic
or one of ``FLOAT_OPS`` on f32 leaves the nest as it was.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.dialects import arith, vector

from pimbuild.codegen import blocking, panels
from pimbuild.codegen.blocking import (
    Accumulator,
    add,
    blocked_dim,
    constant,
    depends,
    largest_factor,
    slope,
)

LANES = 8  # f32 lanes of a 256-bit register (AVX2)
VECTORS = 2  # vectors of columns per row of the tile, where the columns divide by them
# (more where there are fewer than TILE // VECTORS rows)
TILE = 8  # vectors in a tile (rows x vectors): 8 of the 16 AVX2 registers hold accumulators,
# just enough independent sums to keep two FMA units of 4 cycles' latency busy (SIX_ROWS)
PACK = True  # copy the panels the blocks of rows share (``pimbuild.codegen.panels``)
# Where panels pack and the rows divide by 6: tiles of 6 rows x VECTORS vectors, 12
# accumulators, 15 of the 16 registers with the panel's two vectors and a broadcast. With
# 8 accumulators two FMA units of 4 cycles' latency have no slack; 16 (4 x 4) spilled.
SIX_ROWS = True
# The tiles of 12 accumulators it tries, in order (rows, vectors): 6 x 2 loads 2 vectors and 6
# broadcasts per 12 FMAs, 4 x 3 (rows that 6 does not divide: 4096 image tokens) 3 and 4.
TWELVE = ((6, VECTORS), (4, 3))
TRANSPOSED = -1  # ``_plan``'s slope of a load whose outer index moves with the columns
# Ops without side effects: the copies of one for the tile's rows and vectors are merged
# when their operands are the same.
PURE = ("arith.", "math.", "affine.apply")
FLOAT_OPS = {"arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.maximumf",
             "arith.minimumf", "arith.negf"}


def tile(module: ir.Module) -> int:
    """Tile every nest of ``module``'s host functions that ``_plan`` accepts; returns how
    many it tiled."""
    nests = blocking.host_nests(module)
    with module.context:
        return sum(_tile(op) for op in nests)


def _contiguous(memref: ir.Value) -> bool:
    strides, _ = ir.MemRefType(memref.type).get_strides_and_offset()
    return bool(strides) and strides[-1] == 1


def _plan(loops: list[ir.Operation], accs: list[Accumulator],
          col: ir.Value) -> dict[int, int] | None:
    """For each load of the innermost reduction body (by position), the stride of its
    address along the columns (0: a broadcast; ``TRANSPOSED``: 1 along an outer index, as
    ``nn.Linear``'s weight is read); None when the nest cannot be tiled."""
    f32 = ir.F32Type.get()
    ops = [op.operation for op in loops[-1].regions[0].blocks[0].operations][:-1]
    acc_ops = [a.load for a in accs] + [a.store for a in accs]
    if any(ir.MemRefType(a.store.operands[1].type).element_type != f32
           or list(a.store.operands)[-1] != col or not _contiguous(a.store.operands[1])
           or any(depends(i, col) for i in list(a.store.operands)[2:-1]) for a in accs):
        return None
    slopes, varying = {}, {a.load.result for a in accs}
    for n, op in enumerate(ops):
        if any(op == a for a in acc_ops):
            continue
        operands = list(op.operands)
        if not op.name.startswith(PURE) and op.name != "memref.load":
            return None  # a call, a store to something else: copies may not be merged
        if op.name == "memref.load":
            *outer, inner = operands[1:] or [None]
            s = slope(inner, col) if inner is not None else 0
            moving = [i for i in outer if depends(i, col)]
            if s == 0 and len(moving) == 1 and slope(moving[0], col) == 1 and PACK:
                s = TRANSPOSED  # nn.Linear's W[j, k]: only from a panel (``_tile``)
            elif moving or s not in (0, 1, 2):
                return None
            if s and (op.result.type != f32 or not _contiguous(operands[0])):
                return None
            slopes[n] = s
            if s:
                varying.add(op.result)
        elif any(v in varying for v in operands):
            if op.name not in FLOAT_OPS or op.results[0].type != f32:
                return None
            varying.update(op.results)
        elif any(depends(r, col) and not isinstance(r.type, ir.IndexType)
                 for r in op.results):
            return None  # a value that moves with the column but is not an address
    return slopes


def _row_dim(parallel: ir.Operation, d: int, loops: list[ir.Operation],
             accs: list[Accumulator], slopes: dict[int, int]) -> tuple[int, int] | None:
    """The rows of the tile: an outer dimension (``blocked_dim``) that every accumulator's
    address moves with and some vector load does not (its vector then serves every row),
    the innermost such one; else one that some broadcast does not move with (a depthwise
    convolution's output rows share its filter value)."""
    ivs = parallel.regions[0].blocks[0].arguments
    ops = [op.operation for op in loops[-1].regions[0].blocks[0].operations]
    dims, dim = [], blocked_dim(parallel, d)
    while dim is not None:
        if all(ivs[dim[0]] in list(a.store.operands)[2:] for a in accs):
            dims.append(dim)
        dim = blocked_dim(parallel, below=dim[0])
    for shared in ([n for n, s in slopes.items() if s], list(slopes)):
        for dim in dims:
            if any(not any(depends(i, ivs[dim[0]]) for i in list(ops[n].operands)[1:])
                   for n in shared):
                return dim
    return None


def _column(parallel: ir.Operation, loops: list[ir.Operation]) -> tuple[int, int] | None:
    """The dimension whose index is innermost in the first store's address (the columns),
    with its trip count; None when that is not a dimension of ``parallel`` from 0 by 1."""
    body = loops[-1].regions[0].blocks[0]
    store = next((op.operation for op in body.operations
                  if op.operation.name == "memref.store"), None)
    ivs = list(parallel.regions[0].blocks[0].arguments)
    if store is None or len(store.operands) < 3 or store.operands[-1] not in ivs:
        return None
    d, n = ivs.index(store.operands[-1]), len(ivs)
    lb, ub, step = (constant(parallel.operands[k * n + d]) for k in range(3))
    return (d, ub) if (lb, step) == (0, 1) and ub is not None and ub > 1 else None


def _lanes(trips: int) -> tuple[int | None, int]:
    """Lanes per vector for ``trips`` columns, and how many the last vector of a row uses
    when it uses fewer (0: all): vectors of 8 where 8 divides the columns; where it does not,
    up to TILE vectors of 8 covering every column, the last masked (ResNet's 28, 14 and 7;
    not 4 or fewer); else vectors of 4; None when none of these fits."""
    if trips % LANES == 0:
        return LANES, 0
    if LANES // 2 < trips <= TILE * LANES:
        return LANES, trips % LANES
    return (LANES // 2, 0) if trips % (LANES // 2) == 0 else (None, 0)


def _tile(parallel: ir.Operation) -> bool:
    loops = blocking.reduction_loops(parallel)
    dim = _column(parallel, loops) if loops is not None else None
    if dim is None:
        return False
    (d, trips), body = dim, parallel.regions[0].blocks[0]
    col = body.arguments[d]
    accs = blocking.find_accumulators(loops, col)
    slopes = _plan(loops, accs, col) if accs else None
    lanes, tail = _lanes(trips)
    if slopes is None or lanes is None:
        return False
    last = len(body.arguments) - 1
    transposed = TRANSPOSED in slopes.values()
    if transposed and (d != last or tail or lanes < LANES):
        return False  # vectors of 4 (1020 keys): q @ k.T ran 2.15x its time so
    if d != last:  # the columns innermost (a depthwise convolution's channels were)
        blocking.swap(parallel, d, last)
        d, col = last, body.arguments[last]
    v = -(-trips // lanes) if tail else VECTORS if trips % (VECTORS * lanes) == 0 else 1
    rows = _row_dim(parallel, d, loops, accs, slopes)
    r = largest_factor(rows[1], 1, TILE // v) if rows else 1
    while not tail and r * v < TILE and trips % (2 * v * lanes) == 0:
        v *= 2  # few rows (a decode step's heads): more vectors, as many sums in flight
    packs = rows is not None and PACK and not tail and panels.shares(
        parallel, loops, d, rows[0], v * lanes, rows[1] // r)
    if packs and SIX_ROWS and v == VECTORS and r * v == TILE:
        r, v = _twelve(parallel, loops, d, rows, trips, lanes) or (r, v)
    if transposed and not packs:
        return False  # its vectors exist only in a panel
    row_bytes = blocking.row_operand_bytes(loops, accs, body.arguments[rows[0]]) \
        if rows is not None else 0
    inner = rows is not None and (row_bytes <= blocking.ROW_OPERAND_BYTES or packs)
    here, loc = ir.InsertionPoint(loops[0]), loops[0].location
    cols = [col] + [add(col, k * lanes, here, loc) for k in range(1, v)]
    lines = blocking.offsets(body.arguments[rows[0]], r, here, loc) if r > 1 else [None]
    maps = [{col: c, **({body.arguments[rows[0]]: line} if line is not None else {})}
            for line in lines for c in cols]
    masks = [tail if tail and k % v == v - 1 else None for k in range(len(maps))]
    _Emitter(loops, accs, slopes, lanes, loc).emit(maps, masks, here)
    loops[0].erase()
    blocking.set_step(parallel, d, min(v * lanes, trips))
    if r > 1:
        blocking.set_step(parallel, rows[0], r)
    if inner:  # rows innermost: each block of vectors loaded serves every row
        blocking.swap(parallel, d, rows[0])
        if PACK and not tail:
            panels.pack(parallel, column=rows[0], row=d, width=v * lanes, row_bytes=row_bytes)
    if transposed and panels.standins(parallel):
        raise RuntimeError("vectile: W[j, k]'s vectors got no panel (panels.shares said "
                           "they would)")
    if r > 1 or inner:  # the rows each read of the shared operand serves
        blocking.mark_rows(parallel, rows[1] // panels.row_blocks(parallel) if inner else r)
    return True


def _twelve(parallel: ir.Operation, loops: list[ir.Operation], d: int, rows: tuple[int, int],
            trips: int, lanes: int) -> tuple[int, int] | None:
    """Rows and vectors of a tile of 12 accumulators (``TWELVE``: slack for the FMAs'
    latency) whose rows divide the nest's and whose vectors its columns, with panels packed
    for it; None when none fits."""
    for r, v in TWELVE:
        if rows[1] % r == 0 and trips % (v * lanes) == 0 and panels.shares(
                parallel, loops, d, rows[0], v * lanes, rows[1] // r):
            return r, v
    return None


class _Emitter:
    """The tiled nest: the accumulators' vectors loaded before the reduction loops, carried
    through them as ``iter_args``, stored after them."""

    def __init__(self, loops: list[ir.Operation], accs: list[Accumulator],
                 slopes: dict[int, int], lanes: int, loc: ir.Location) -> None:
        self.loops, self.accs, self.slopes, self.loc = loops, accs, slopes, loc
        with loc:
            self.vector = ir.VectorType.get([lanes], ir.F32Type.get())
        self.cache: dict = {}  # (op position, operands) -> results: one copy for every row

    def emit(self, maps: list[dict], masks: list[int | None],
             here: ir.InsertionPoint) -> None:
        """One copy of the body per entry of ``maps``; ``masks``: for each, how many lanes
        its vectors use when fewer than all (masked loads and stores), else None."""
        inits = [self._load_vector(a.load, dict(m), here, 1, mask)
                 for a in self.accs for m, mask in zip(maps, masks, strict=True)]
        nest = blocking.jam(self.loops, self.accs, maps, inits, here, self.loc,
                            lambda k, mapping, ip: self._body(mapping, ip, masks[k]))
        for a, acc in enumerate(self.accs):
            for k, m in enumerate(maps):
                index = [m.get(i, i) for i in list(acc.store.operands)[2:]]
                value, memref = nest.results[a * len(maps) + k], acc.store.operands[1]
                with here, self.loc:
                    if masks[k] is None:
                        vector.StoreOp(value, memref, index)
                    else:
                        vector.MaskedStoreOp(memref, index, self._mask(masks[k], 1), value)

    def _body(self, mapping: dict, ip: ir.InsertionPoint,
              mask: int | None) -> list[ir.Value]:
        """One copy of the reduction body; returns each accumulator's new value."""
        ops = [op.operation for op in self.loops[-1].regions[0].blocks[0].operations][:-1]
        new = [None] * len(self.accs)
        for n, op in enumerate(ops):
            store = next((a for a, x in enumerate(self.accs) if op == x.store), None)
            if store is not None:
                new[store] = self._as_vector(mapping[op.operands[0]], ip)
            elif any(op == x.load for x in self.accs):
                continue
            else:
                key = (n, *[mapping.get(v, v) for v in op.operands])
                if key not in self.cache:
                    self.cache[key] = self._one(op, n, mapping, ip, mask)
                mapping.update(zip(op.results, self.cache[key], strict=True))
        return new

    def _one(self, op: ir.Operation, n: int, mapping: dict, ip: ir.InsertionPoint,
             mask: int | None) -> list[ir.Value]:
        if self.slopes.get(n) == TRANSPOSED:  # a stand-in ``panels.pack`` replaces
            index = [mapping.get(i, i) for i in list(op.operands)[1:]]
            with ip, self.loc:
                load = vector.LoadOp(self.vector, op.operands[0], index)
            load.operation.attributes[panels.TRANSPOSED_ATTR] = ir.UnitAttr.get()
            return [load.result]
        if self.slopes.get(n):
            return [self._load_vector(op, mapping, ip, self.slopes[n], mask)]
        operands = [mapping.get(v, v) for v in op.operands]
        if op.name in FLOAT_OPS and any(isinstance(v.type, ir.VectorType) for v in operands):
            operands = [self._as_vector(v, ip) for v in operands]
            with ip, self.loc:
                attributes = {name: op.attributes[name] for name in op.attributes}
                return list(ir.Operation.create(op.name, results=[self.vector],
                                                operands=operands,
                                                attributes=attributes).results)
        return list(blocking.clone(op, dict(mapping), ip).results)

    def _load_vector(self, load: ir.Operation, mapping: dict, ip: ir.InsertionPoint,
                     stride: int, mask: int | None) -> ir.Value:
        """``lanes`` elements of ``load``'s buffer from its address under ``mapping``, every
        ``stride``-th: a vector load of just the elements the lanes read (of the first
        ``mask`` lanes' if given; the others read as 0), then a shuffle."""
        lanes = self.vector.shape[0]
        index = [mapping.get(i, i) for i in list(load.operands)[1:]]
        with ip, self.loc:
            span = ir.VectorType.get([stride * (lanes - 1) + 1], ir.F32Type.get())
            if mask is None:
                loaded = vector.LoadOp(span, load.operands[0], index).result
            else:
                zero = arith.ConstantOp(span, ir.DenseElementsAttr.get_splat(
                    span, ir.FloatAttr.get(ir.F32Type.get(), 0.0))).result
                loaded = vector.MaskedLoadOp(span, load.operands[0], index,
                                             self._mask(mask, stride), zero).result
            if stride == 1:
                return loaded
            mask = ir.DenseI64ArrayAttr.get([stride * k for k in range(lanes)])
            return ir.Operation.create("vector.shuffle", results=[self.vector],
                                       operands=[loaded, loaded],
                                       attributes={"mask": mask}).result

    def _mask(self, used: int, stride: int) -> ir.Value:
        """The mask of the elements the first ``used`` lanes read at ``stride``."""
        span = stride * (self.vector.shape[0] - 1) + 1
        bits = ir.VectorType.get([span], ir.IntegerType.get_signless(1))
        return vector.ConstantMaskOp(bits, [stride * (used - 1) + 1]).result

    def _as_vector(self, value: ir.Value, ip: ir.InsertionPoint) -> ir.Value:
        if isinstance(value.type, ir.VectorType):
            return value
        key = ("broadcast", value)
        if key not in self.cache:
            with ip, self.loc:
                self.cache[key] = ir.Operation.create("vector.broadcast", results=[self.vector],
                                                      operands=[value]).result
        return self.cache[key]
