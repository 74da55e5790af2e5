"""Host code generation: register blocking of reduction nests, before the LLVM dialect; and
the builder helpers the other passes (``vectile``, ``panels``, ``relayout``) share: the public
functions below ``constant`` (reading loop nests: ``reduction_loops``, ``find_accumulators``,
``depends``, ``slope``; building IR: ``index_constant``, ``clone``, ``add``, ``offsets``,
``jam``; editing a ``scf.parallel``: ``swap``, ``set_step``, ``mark_rows``). Names with a leading
underscore are this module's own.

``convert-linalg-to-parallel-loops`` turns a matrix-vector product into one ``scf.parallel``
over the outputs whose body is an ``scf.for`` over the reduction dimension; each iteration
loads, updates and stores its accumulator in memory and streams one weight row. One row at a
time leaves the memory system idle between misses (about 10 GB/s here, against 16-20 GB/s for
oneDNN's gemv on one thread). ``register_block`` unrolls the innermost parallel dimension by
``u`` and jams the copies into one reduction loop whose accumulators are ``iter_args``
(scalar replacement): ``u`` rows stream at once and LLVM vectorizes the loop over the
reduction dimension with ``u`` vector accumulators.

``interchange`` handles the other layout first: ``x @ W`` with ``W`` stored (K, N), as GPT-2's
``Conv1D`` and ``torch.matmul`` with a weight write it, reads ``W[k, j]``, so a reduction loop
innermost strides down a column of ``W``: every iteration a new cache line and, at a row
length of 12 KiB, a new page (1.2 GFLOP/s for GPT-2's FFN here, 11x slower than eager).
The reduction loops go outside the parallel dimension instead, which becomes the innermost
loop: it reads ``W``'s rows and updates the accumulators contiguously, and LLVM vectorizes
it. Each pass over the columns adds up to ``TERMS`` terms of every sum, with the sums carried
in registers between them: an accumulator is loaded and stored once per ``TERMS`` terms
instead of once per term, which bounded the loop by its stores (GPT-2's forward at 16 tokens
1.23x -> 1.09x eager's time at 4 terms, on this project's AMD EPYC VM). Each sum still adds
its terms in the same order.

With several rows of ``x`` (a product over a few tokens), up to ``ROWS`` of them are jammed
too, so each weight row loaded serves them all. The rows then run innermost (``swap``) when
the weight moves with the columns (``_weight_moves``: nn.Linear's, not a convolution's
filter) and what moves with the rows fits in ``ROW_OPERAND_BYTES``: each block of weight
rows is loaded from memory once and used by every row of ``x``, which stays in the L2,
instead of the whole weight streaming from memory once per block of rows (a 32-token
encoder layer's FFN, 768 x 3072: 3.9 -> 2.8 ms, eager 3.1, on this project's AMD EPYC VM).
``x @ W`` in the interchanged form does the same over blocks of W's columns
(``COLUMN_BLOCK_BYTES``).

This runs where the program is compiled (instrument, reinsert, calibrate), after extract has
read ``scf.mlir``: the nests the tool reasons about (their ids, iteration counts and data
volumes) stay those of the paper; only the code that runs them changes. MLIR has an
unroll-and-jam for affine loops and ``scf.for`` only, and no scalar replacement on memrefs
outside affine, so this is written against the Python bindings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch_mlir import ir
from torch_mlir.dialects import scf

from pimbuild.codegen.bounds import constant_index, owner
from pimbuild.codegen.loops import memref_bytes, view_root
from pimbuild.frontend import mlir

# Rows of a product jammed together at most (``_block``): each shares the weight row loaded.
ROWS = 4
ROWS_ATTR = "pimbuild.rows"
# The rows of a product run innermost when the buffers that move with them hold at most this
# (x of every row): half the smallest L2 of the hosts here (1 MiB on the AMD EPYC VMs).
ROW_OPERAND_BYTES = 512 * 1024
# ``x @ W`` (the interchanged form) with its rows innermost runs over blocks of W's columns
# of at most this many bytes, which stay in the L2 while every row uses them.
COLUMN_BLOCK_BYTES = 256 * 1024
# ``x @ W`` adds up to this many terms of each sum per pass over the columns, its
# accumulators loaded and stored once for them (``_columns``).
TERMS = 4


@dataclass
class Accumulator:
    load: ir.Operation   # memref.load acc[idx] inside the reduction loop
    store: ir.Operation  # memref.store v, acc[idx], the same idx


def _defined_in(value: ir.Value, block: ir.Block) -> bool:
    defining = owner(value)
    if isinstance(defining, ir.Block):
        return defining == block
    return defining.block == block


def constant(value: ir.Value) -> int | None:
    try:
        return constant_index(value)
    except ValueError:
        return None


def reduction_loops(parallel: ir.Operation) -> list[ir.Operation] | None:
    """The perfect nest of ``scf.for`` loops that is the whole body of ``parallel`` (outermost
    first), or None when the body is anything else."""
    ops = [op.operation for op in parallel.regions[0].blocks[0].operations]
    if len(parallel.results) or [op.name for op in ops] != ["scf.for", "scf.reduce"]:
        return None
    loops = [ops[0]]
    while True:
        body = [op.operation for op in loops[-1].regions[0].blocks[0].operations]
        if len(loops[-1].results) or len(body[-1].operands):
            return None
        if [op.name for op in body] != ["scf.for", "scf.yield"]:
            return loops
        loops.append(body[0])


def reduction_ivs(loops: list[ir.Operation]) -> list[ir.Value]:
    return [loop.regions[0].blocks[0].arguments[0] for loop in loops]


def find_accumulators(loops: list[ir.Operation], iv: ir.Value) -> list[Accumulator] | None:
    """The load/store pairs of the innermost loop whose address is invariant in every loop of
    the nest and moves with ``iv``; None when the nest is not of that form."""
    body = loops[-1].regions[0].blocks[0]
    ops = [op.operation for op in body.operations]
    if any(len(op.regions) for op in ops[:-1]):
        return None
    ivs = reduction_ivs(loops)
    loads = [op for op in ops if op.name == "memref.load"]
    stores = [op for op in ops if op.name == "memref.store"]
    accs = []
    for store in stores:
        memref, indices = store.operands[1], list(store.operands)[2:]
        if iv not in indices or any(i in ivs or _defined_in(i, body) for i in indices):
            return None  # the address moves with the reduction loops, or not with iv
        matching = [ld for ld in loads
                    if ld.operands[0] == memref and list(ld.operands)[1:] == indices]
        if len(matching) != 1 or ops.index(matching[0]) > ops.index(store):
            return None
        accs.append(Accumulator(matching[0], store))
    if not accs or len({ops.index(a.load) for a in accs}) < len(accs):
        return None
    roots = [view_root(a.store.operands[1]) for a in accs]
    if any(r in roots[:i] for i, r in enumerate(roots)):
        return None  # two sums in one buffer: their addresses may coincide
    paired = [a.load for a in accs] + [a.store for a in accs]
    for op in loads + stores:
        memref = op.operands[0] if op.name == "memref.load" else op.operands[1]
        if not any(op == p for p in paired) and view_root(memref) in roots:
            return None  # the accumulator's buffer is also accessed another way
    return accs


def index_constant(value: int, ip: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    with ip, loc:
        index = ir.IndexType.get()
        return ir.Operation.create("arith.constant", results=[index], attributes={
            "value": ir.IntegerAttr.get(index, value)}).result


def clone(op: ir.Operation, mapping: dict, ip: ir.InsertionPoint) -> ir.Operation:
    """``op`` cloned at ``ip`` with its operands renamed through ``mapping``."""
    new = op.clone(ip=ip).operation
    for i, operand in enumerate(new.operands):
        if operand in mapping:
            new.operands[i] = mapping[operand]
    for old, result in zip(op.results, new.results, strict=True):
        mapping[old] = result
    return new


def blocked_dim(parallel: ir.Operation, below: int | None = None) -> tuple[int, int] | None:
    """The innermost dimension of ``parallel`` (outside dimension ``below`` if given) with
    more than one iteration (from 0, step 1, constant bounds) and its trip count: the one to
    unroll. None when there is none."""
    n = len(parallel.regions[0].blocks[0].arguments)
    for d in reversed(range(n if below is None else below)):
        lb, ub, step = (constant(parallel.operands[k * n + d]) for k in range(3))
        if lb == 0 and step == 1 and ub is not None and ub > 1:
            return d, ub
        if (lb, step) != (0, 1) or ub != 1:
            return None  # a dimension this does not handle comes first
    return None


def largest_factor(trips: int, n_acc: int, factor: int) -> int:
    """The largest power of two up to ``factor // n_acc`` that divides ``trips``."""
    u = 1
    while 2 * u * n_acc <= factor and trips % (2 * u) == 0:
        u *= 2
    return u


def jam(loops: list[ir.Operation], accs: list[Accumulator], maps: list[dict],
         inits: list[ir.Value], here: ir.InsertionPoint, loc: ir.Location,
         copy: Callable[[int, dict, ir.InsertionPoint], list[ir.Value]] | None = None,
         ) -> ir.Operation:
    """A copy of the loop nest that carries ``inits`` as ``iter_args`` through every level and
    runs ``len(maps)`` renamed copies of the innermost body in each iteration. ``copy(k,
    mapping, ip)`` writes copy ``k`` (its accumulators' loads mapped to their ``iter_args``)
    and returns each accumulator's new value; by default the body's ops cloned as they are
    (``vectile`` writes vector ones)."""
    u, nest = len(maps), []
    with loc:
        for loop in loops:
            carried = nest[-1].inner_iter_args if nest else inits
            ip = ir.InsertionPoint(nest[-1].body) if nest else here
            nest.append(scf.ForOp(*list(loop.operands)[:3], carried, ip=ip))
    renamed = {loop.regions[0].blocks[0].arguments[0]: new.induction_variable
               for loop, new in zip(loops, nest, strict=True)}
    inner, yields = ir.InsertionPoint(nest[-1].body), [None] * len(inits)
    copy = copy or _scalar_copy(loops, accs)
    for k in range(u):
        mapping = {**maps[k], **renamed}
        for a, acc in enumerate(accs):
            mapping[acc.load.result] = nest[-1].inner_iter_args[a * u + k]
        for a, value in enumerate(copy(k, mapping, inner)):
            yields[a * u + k] = value
    with loc:
        for level, values in zip(nest, [n.results for n in nest[1:]] + [yields], strict=True):
            with ir.InsertionPoint(level.body):
                scf.YieldOp(list(values))
    return nest[0]


def _scalar_copy(loops: list[ir.Operation], accs: list[Accumulator]):
    """``jam``'s default copy: the innermost body's ops cloned, each accumulator's store
    giving its new value."""
    def copy(k: int, mapping: dict, inner: ir.InsertionPoint) -> list[ir.Value]:
        new = [None] * len(accs)
        for op in [o.operation for o in loops[-1].regions[0].blocks[0].operations][:-1]:
            acc = next((a for a, x in enumerate(accs) if op == x.store), None)
            if acc is not None:
                new[acc] = mapping.get(op.operands[0], op.operands[0])
            elif not any(op == x.load for x in accs):
                clone(op, mapping, inner)
        return new
    return copy


def _row_dim(parallel: ir.Operation, d: int, loops: list[ir.Operation],
             accs: list[Accumulator]) -> tuple[int, int] | None:
    """The dimension of the rows: outside ``d``, with more than one iteration
    (``blocked_dim``), every accumulator's address moving with it and some buffer the
    reduction reads not (a weight row that rows of x share; attention's heads share nothing,
    so they are not jammed). Among those, the ones that share the weight (``_weight_moves``)
    first, then an even number of iterations (which can be jammed), then the innermost: a
    fused QKV projection's three chunks, or ViT's heads, share x but not the weight, and
    come before the tokens, which share it; ViT's 17 tokens cannot be jammed but can run
    innermost (10-13% on ViT-B and BERT-base against taking the heads)."""
    ivs, found, outer = parallel.regions[0].blocks[0].arguments, [], blocked_dim(parallel, d)
    while outer is not None:
        row = ivs[outer[0]]
        if all(row in list(a.store.operands)[2:] for a in accs) and _shared(loops, accs, row):
            found.append(outer)
        outer = blocked_dim(parallel, below=outer[0])
    weight = [dim for dim in found if _weight_moves(loops, accs, ivs[d], ivs[dim[0]])]
    pool = weight or found
    return next((dim for dim in pool if dim[1] % 2 == 0), pool[0] if pool else None)


def _loads(loops: list[ir.Operation], accs: list[Accumulator]) -> list[ir.Operation]:
    """The loads of the innermost reduction loop but the accumulators'."""
    body = [op.operation for op in loops[-1].regions[0].blocks[0].operations]
    return [op for op in body if op.name == "memref.load"
            and not any(op == a.load for a in accs)]


def _reads(loops: list[ir.Operation], accs: list[Accumulator]) -> list[list[ir.Value]]:
    """The indices of every load in the innermost reduction loop but the accumulators'."""
    return [list(op.operands)[1:] for op in _loads(loops, accs)]


def _shared(loops: list[ir.Operation], accs: list[Accumulator], row: ir.Value) -> bool:
    """Whether the reduction reads a buffer at an address that moves with a reduction loop
    and is made of induction variables and constants other than ``row``."""
    ivs = reduction_ivs(loops)
    return any(all(isinstance(owner(i), ir.Block) or constant(i) is not None for i in index)
               and row not in index and any(i in ivs for i in index)
               for index in _reads(loops, accs))


def depends(value: ir.Value, iv: ir.Value) -> bool:
    """Whether ``value`` is ``iv`` or computed from it (a convolution's ``oh * 2 + kh``)."""
    if value == iv:
        return True
    op = owner(value)
    return not isinstance(op, ir.Block) and any(depends(v, iv) for v in op.operands)


def slope(value: ir.Value, iv: ir.Value) -> int | None:
    """How far ``value`` (an index) moves when ``iv`` moves by one: 0 when it does not
    depend on ``iv``, None when it is not affine in it (or not computed by ops this knows)."""
    if not depends(value, iv):
        return 0
    if value == iv:
        return 1
    op = owner(value)
    if op.name in ("arith.addi", "arith.subi"):
        a, b = (slope(v, iv) for v in op.operands)
        if a is None or b is None:
            return None
        return a + b if op.name == "arith.addi" else a - b
    if op.name == "arith.muli":
        for k, other in ((0, 1), (1, 0)):
            c = constant(op.operands[k])
            if c is not None:
                s = slope(op.operands[other], iv)
                return None if s is None else c * s
        return None
    if op.name == "affine.apply":
        amap = ir.AffineMapAttr(op.attributes["map"]).value
        if len(amap.results) != 1:
            return None
        slopes = [slope(v, iv) for v in op.operands]
        if any(s is None for s in slopes):
            return None
        total = 0
        for position, s in enumerate(slopes):
            if s:
                c = _coefficient(amap.results[0], position, amap.n_dims)
                if c is None:
                    return None
                total += c * s
        return total
    return None


def _coefficient(e: ir.AffineExpr, position: int, n_dims: int) -> int | None:
    """The coefficient of operand ``position`` (a dim, then the symbols) in ``e``; None
    when ``e`` is not linear in it."""
    if isinstance(e, ir.AffineDimExpr):
        return int(e.position == position)
    if isinstance(e, ir.AffineSymbolExpr):
        return int(e.position + n_dims == position)
    if isinstance(e, ir.AffineConstantExpr):
        return 0
    if isinstance(e, ir.AffineAddExpr):
        a, b = (_coefficient(x, position, n_dims) for x in (e.lhs, e.rhs))
        return None if a is None or b is None else a + b
    if isinstance(e, ir.AffineMulExpr):
        for c, x in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
            if isinstance(c, ir.AffineConstantExpr):
                k = _coefficient(x, position, n_dims)
                return None if k is None else c.value * k
    return None


def _weight_moves(loops: list[ir.Operation], accs: list[Accumulator], column: ir.Value,
                  row: ir.Value) -> bool:
    """Whether a buffer the rows share is read at an address that moves with the column:
    a weight row per column (nn.Linear's W[j, k]), which running the rows innermost reads
    once for all of them. A convolution's filter does not move with the output column, and
    its input's rows are strided views: those stay as they are."""
    return any(any(depends(i, column) for i in op.operands[1:])
               and not any(depends(i, row) for i in op.operands[1:])
               for op in _loads(loops, accs))


def row_operand_bytes(loops: list[ir.Operation], accs: list[Accumulator],
                       row: ir.Value) -> int:
    """Bytes of the buffers the reduction reads at an address that moves with ``row`` (whole
    buffers, each once; the weight when ``row`` is a column's index); unbounded when one has
    a dynamic shape."""
    buffers = {view_root(op.operands[0]): op.operands[0] for op in _loads(loops, accs)
               if any(depends(i, row) for i in list(op.operands)[1:])}
    if not all(ir.MemRefType(b.type).has_static_shape for b in buffers.values()):
        return 1 << 62
    return sum(memref_bytes(b.type)[2] for b in buffers.values())


def _column_block(loops: list[ir.Operation], accs: list[Accumulator], iv: ir.Value,
                  trips: int) -> int:
    """Columns per block for ``x @ W`` with its rows innermost: ``trips`` halved while its
    share of W exceeds COLUMN_BLOCK_BYTES, down to 16 columns (a few vectors); ``trips`` (one
    block) when W fits whole or no such count fits (GPT-2's 3072 x 768: 24 columns of 12 KiB
    are past it, so it stays whole)."""
    column = row_operand_bytes(loops, accs, iv) / trips
    block = trips
    while block * column > COLUMN_BLOCK_BYTES and block % 2 == 0 and block // 2 >= 16:
        block //= 2
    return block if block * column <= COLUMN_BLOCK_BYTES else trips


def swap(parallel: ir.Operation, a: int, b: int) -> None:
    """Exchange dimensions ``a`` and ``b`` of ``parallel`` (bounds, steps and induction
    variables): its iterations are independent, so only their order changes."""
    n = len(parallel.regions[0].blocks[0].arguments)
    for k in range(3):
        first, second = parallel.operands[k * n + a], parallel.operands[k * n + b]
        parallel.operands[k * n + a], parallel.operands[k * n + b] = second, first
    ivs = parallel.regions[0].blocks[0].arguments
    uses = [[(use.owner, use.operand_number) for use in ivs[i].uses] for i in (a, b)]
    for (user, i), iv in [(u, ivs[b]) for u in uses[0]] + [(u, ivs[a]) for u in uses[1]]:
        user.operands[i] = iv


def set_step(parallel: ir.Operation, d: int, step: int) -> None:
    """Set the step of dimension ``d`` of ``parallel`` (a constant placed before it)."""
    n = len(parallel.regions[0].blocks[0].arguments)
    parallel.operands[2 * n + d] = index_constant(step, ir.InsertionPoint(parallel),
                                                   parallel.location)


def mark_rows(parallel: ir.Operation, r: int) -> None:
    """Record on the nest how many rows share each read of the operand they share
    (``ROWS_ATTR``): the footprint counter backend models the traffic with it."""
    i64 = ir.IntegerType.get_signless(64)
    parallel.attributes[ROWS_ATTR] = ir.IntegerAttr.get(i64, r)


def add(iv: ir.Value, k: int, here: ir.InsertionPoint, loc: ir.Location) -> ir.Value:
    """``iv + k``."""
    c = index_constant(k, here, loc)
    with here, loc:
        return ir.Operation.create("arith.addi", results=[ir.IndexType.get()],
                                   operands=[iv, c]).result


def offsets(iv: ir.Value, u: int, here: ir.InsertionPoint, loc: ir.Location) -> list[ir.Value]:
    """``iv, iv + 1, ..., iv + u - 1``."""
    return [iv] + [add(iv, k, here, loc) for k in range(1, u)]


def _block(parallel: ir.Operation, factor: int) -> bool:
    loops, dim = reduction_loops(parallel), blocked_dim(parallel)
    if loops is None or dim is None:
        return False
    (d, trips), body = dim, parallel.regions[0].blocks[0]
    iv = body.arguments[d]
    accs = find_accumulators(loops, iv)
    if not accs or largest_factor(trips, len(accs), factor) == 1:
        return False
    # With more than one row, up to ROWS rows share each loaded weight row (a quarter of
    # the weight traffic at 4) and the rest of the factor goes to the columns.
    rows = _row_dim(parallel, d, loops, accs)
    r = largest_factor(rows[1], len(accs), min(ROWS, factor // (2 * len(accs)))) if rows else 1
    u = largest_factor(trips, len(accs) * r, factor)
    inner = rows is not None and _weight_moves(loops, accs, iv, body.arguments[rows[0]]) \
        and row_operand_bytes(loops, accs, body.arguments[rows[0]]) <= ROW_OPERAND_BYTES
    here, loc = ir.InsertionPoint(loops[0]), loops[0].location
    cols = offsets(iv, u, here, loc)
    lines = offsets(body.arguments[rows[0]], r, here, loc) if r > 1 else [None]
    maps = [{iv: c, **({body.arguments[rows[0]]: line} if line is not None else {})}
            for line in lines for c in cols]
    inits = [clone(a.load, dict(m), here).result for a in accs for m in maps]
    jammed = jam(loops, accs, maps, inits, here, loc)
    for a, acc in enumerate(accs):
        for k, m in enumerate(maps):
            clone(acc.store, {**m, acc.store.operands[0]: jammed.results[a * len(maps) + k]},
                   here)
    loops[0].erase()
    set_step(parallel, d, u)
    if r > 1:
        set_step(parallel, rows[0], r)
    if inner:  # rows innermost: every row shares each block of weight rows loaded
        swap(parallel, d, rows[0])
    if r > 1 or inner:
        mark_rows(parallel, rows[1] if inner else r)
    return True


def _strided(loops: list[ir.Operation], accs: list[Accumulator], iv: ir.Value) -> bool:
    """Whether the reduction reads a buffer whose innermost index is ``iv`` while a reduction
    loop moves an outer index (``W[k, j]``), and none whose innermost index is a reduction
    loop's while ``iv`` moves an outer one (``W[j, k]``, ``nn.Linear``'s layout, which
    ``_block`` serves)."""
    ivs, indices = reduction_ivs(loops), _reads(loops, accs)
    along_iv = any(ix and ix[-1] == iv and any(i in ivs for i in ix[:-1]) for ix in indices)
    along_k = any(ix and ix[-1] in ivs and iv in ix[:-1] for ix in indices)
    return along_iv and not along_k


def _interchange(parallel: ir.Operation, min_trips: int = 8) -> bool:
    """Reduction loops outside the innermost parallel dimension (``_strided`` nests), and up
    to ROWS rows in each iteration of the new innermost loop. With its rows' x within
    ROW_OPERAND_BYTES, that loop covers a block of columns (``_column_block``) and the rows
    run inside the blocks: each block of W is read from memory once for every row."""
    loops, dim = reduction_loops(parallel), blocked_dim(parallel)
    if loops is None or dim is None or dim[1] < min_trips:
        return False
    (d, trips), body = dim, parallel.regions[0].blocks[0]
    iv = body.arguments[d]
    accs = find_accumulators(loops, iv)
    if not accs or not _strided(loops, accs, iv):
        return False
    here, loc = ir.InsertionPoint(loops[0]), loops[0].location
    rows = _row_dim(parallel, d, loops, accs)
    r = largest_factor(rows[1], 1, ROWS) if rows else 1
    fits = rows is not None and row_operand_bytes(loops, accs, body.arguments[rows[0]]) \
        <= ROW_OPERAND_BYTES
    block = _column_block(loops, accs, iv, trips) if fits else trips
    lines = offsets(body.arguments[rows[0]], r, here, loc) if r > 1 else []
    k_step = _unroll(loops[-1])
    steps = [list(loop.operands)[2] for loop in loops]
    if k_step > 1:  # the innermost reduction loop steps over k_step terms
        steps[-1] = index_constant(k_step, here, loc)
    nest = []
    with loc:
        for loop, step in zip(loops, steps, strict=True):
            ip = ir.InsertionPoint(nest[-1].body) if nest else here
            nest.append(scf.ForOp(*list(loop.operands)[:2], step, [], ip=ip))
        outer = ir.InsertionPoint(nest[-1].body)  # the reduction's innermost level
        first = ir.InsertionPoint(nest[0])
        bounds = [index_constant(v, first, loc) for v in (0, trips, 1)]
        if block < trips:  # from this block's first column, ``block`` of them
            bounds[:2] = [iv, add(iv, block, first, loc)]
        terms = offsets(nest[-1].induction_variable, k_step, outer, loc)
        nest.append(scf.ForOp(*bounds, [], ip=outer))
    mapping = {loop.regions[0].blocks[0].arguments[0]: new.induction_variable
               for loop, new in zip(loops, nest, strict=False)}
    mapping[iv] = nest[-1].induction_variable
    maps = [{**mapping, body.arguments[rows[0]]: line} for line in lines] or [mapping]
    _columns(loops, accs, maps, terms, nest[-1], ir.InsertionPoint(nest[-1]))
    with loc:
        for level in nest:
            with ir.InsertionPoint(level.body):
                scf.YieldOp([])
    loops[0].erase()
    set_step(parallel, d, block)
    if r > 1:
        set_step(parallel, rows[0], r)
    if block < trips:  # rows innermost: every row shares each block of W read
        swap(parallel, d, rows[0])
    if r > 1 or block < trips:
        mark_rows(parallel, rows[1] if block < trips else r)
    return True


def _unroll(loop: ir.Operation) -> int:
    """Terms of ``loop`` (the innermost reduction loop of an ``x @ W`` nest) that each
    iteration of the column loop inside it adds: the largest power of two up to TERMS that
    divides its trip count (constant bounds, step 1), else 1."""
    lb, ub, step = (constant(v) for v in list(loop.operands)[:3])
    if lb is None or ub is None or step != 1:
        return 1
    return largest_factor(ub - lb, 1, TERMS)


def _columns(loops: list[ir.Operation], accs: list[Accumulator], maps: list[dict],
             terms: list[ir.Value], column: ir.Operation, hoist: ir.InsertionPoint) -> None:
    """The body of the column loop ``column`` of an interchanged nest: for each reduction
    index in ``terms`` in order, one copy of the reduction's body per row (``maps``). An op
    whose operands are the same in every row (the weight row's load) is cloned once, so each
    row of W is read once for every row of x; an op that does not depend on the column (x's
    load, broadcast) goes before the column loop (``hoist``): nothing in the loop writes
    the buffers it reads (``find_accumulators``: an accumulator's buffer is read no other way).
    Each row's accumulators are loaded before the first term and stored after the last, and
    between them carried in SSA values: the sums add their terms in the same order."""
    k = loops[-1].regions[0].blocks[0].arguments[0]
    ops = [o.operation for o in loops[-1].regions[0].blocks[0].operations][:-1]
    inner, varying = ir.InsertionPoint(column.regions[0].blocks[0]), {column.induction_variable}
    carried = [{} for _ in maps]  # per row: each accumulator's running sum
    for t, term in enumerate(terms):
        renamed = [{**m, k: term} for m in maps]
        for op in ops:
            first = None
            a = next((i for i, x in enumerate(accs) if op in (x.load, x.store)), None)
            for row, m in enumerate(renamed):
                if a is not None and op == accs[a].load and t > 0:
                    m[op.result] = carried[row][a]
                    continue
                if a is not None and op == accs[a].store and t < len(terms) - 1:
                    carried[row][a] = m.get(op.operands[0], op.operands[0])
                    continue
                operands = [m.get(v, v) for v in op.operands]
                if first is not None and operands == first[0]:
                    m.update(zip(op.results, first[1].results, strict=True))
                    continue
                moves = a is not None or any(v in varying for v in operands)
                new = clone(op, m, inner if moves else hoist)
                if moves:
                    varying.update(new.results)
                first = first or (operands, new)


def host_nests(module: ir.Module) -> list[ir.Operation]:
    """Every ``scf.parallel`` of ``module``'s host functions (``mlir.host_functions``), in
    program order: the nests host code generation rewrites."""
    return [op for func in mlir.host_functions(module)
            for op in mlir.walk(func) if op.name == "scf.parallel"]


def interchange(module: ir.Module) -> int:
    """Move the reduction loops of every nest that strides down its weight's columns
    (``_strided``) outside its innermost parallel dimension; returns how many it moved.
    Functions marked ``pimbuild.target`` are left alone (``register_block``)."""
    nests = host_nests(module)
    with module.context:
        return sum(_interchange(op) for op in nests)


def register_block(module: ir.Module, factor: int) -> int:
    """Unroll-and-jam every reduction nest's innermost parallel dimension by up to
    ``factor`` with its accumulators in registers; returns how many nests it blocked.

    Functions marked ``pimbuild.target`` (the units reinsert outlined for a device) are left
    as they are: the host runs them only to check the hybrid program, and their code is the
    device compiler's business, so blocking them would only cost compile time."""
    if factor <= 1:
        return 0
    nests = host_nests(module)
    with module.context:
        return sum(_block(op, factor) for op in nests)
