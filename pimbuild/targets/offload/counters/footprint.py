"""Counter backend ``footprint``: the counts of the ``valgrind`` backend, modelled from the
buffers each nest reads and writes, with no run under a simulator.

Extract lists, per nest, the buffers it reads and writes (``reads`` / ``writes``: allocation ->
bytes; ``read_extents``: the bytes of the views a buffer is read through, when they are made
outside the nest). The cache is the platform's last level as the valgrind backend configures it
(``profile.valgrind_last_level``: the LLC, or the core's L2), held as a least-recently-used
list of whole buffers, walked in program order: a nest's ``offcore_data_rd`` is the lines of
the buffers it reads that are not resident when it starts, its ``ll_write_misses`` the lines
of those it writes that are not; then all of them are the most recent, and the least recent
are evicted past the capacity. The walk starts from an empty cache (one forward after a
flush) or, with ``profile.valgrind_warm``, counts the second of two forwards.

Inside a nest, one reuse is modelled (``rereads``): a buffer that the outermost parallel
loop does not address is read again by each of its iterations (by each group of rows that
code generation jammed, ``codegen.ROWS``), from memory when one pass's data does not fit in
the cache (a GEMM of several rows streaming a weight larger than the cache once per pass).
It models compulsory and capacity misses at the grain of
whole buffers, or of the views a buffer is read through (extract's ``read_views``: after one
half of a buffer is read, reading the other half misses).
Not in it: other reuse inside a nest (a tiled loop order, a panel of a large GEMM),
streaming that evicts only part of a buffer, conflict misses, hardware prefetching, and
every access outside the candidate nests.
docs/design.md §8 gives its agreement with valgrind's counts and decisions
(``bench/profile_cost.py``).

Why: on a host without hardware counters (a VM), valgrind is the only measurement, and
running one forward under it costs about 38 forwards before it counts anything; this backend
costs nothing beyond the timing run.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from pimbuild.targets.offload.counters import CounterRun

if TYPE_CHECKING:
    from pimbuild.targets.offload.program import Params

N_RD, WRITE_MISSES = "offcore_data_rd", "ll_write_misses"


def available(run: CounterRun | None = None) -> tuple[bool, str]:
    return True, "footprint: modelled from each nest's buffers (no run)"


def count(run: CounterRun) -> list[dict]:
    return rows(run.program.candidates, run.params)


def rows(candidates: list[dict], p: Params) -> list[dict]:
    """The backend's rows for extract's ``candidates`` under the profile params' cache."""
    counts = footprint_counts(candidates, p.last_level[0], p.cache_line, p.valgrind_warm)
    return [{"id": c["id"], "source_op": c["source_op"], "counter_source": "footprint",
             "counts": counts[c["id"]]} for c in candidates]


def footprint_counts(candidates: list[dict], capacity: int, line: int, warm: bool = False
                     ) -> dict[int, dict[str, int]]:
    """Per nest id, ``{offcore_data_rd, ll_write_misses}`` for one forward (the second of
    two if ``warm``), from an LRU of whole buffers of ``capacity`` bytes."""
    cache = _Lru(capacity)
    counts = {}
    for _ in range(2 if warm else 1):
        for c in candidates:
            read = extents(c)
            missed, written = cache.nest(read, c["writes"], line, repeated(c),
                                         c.get("read_views"))
            counts[c["id"]] = {N_RD: missed + rereads(c, read, capacity, line),
                               WRITE_MISSES: written}
    return counts


def extents(c: dict) -> dict[str, int]:
    """Bytes the nest reads of each buffer: extract's ``read_extents`` (a view's bytes when
    the nest reads a buffer only through views), else the whole buffers."""
    return c.get("read_extents", c["reads"])


def repeated(c: dict) -> list[str]:
    """The buffers a nest reads in every iteration of the loop that repeats in its compiled
    code: the outermost parallel loop's invariant reads (extract's
    ``outer_invariant_reads``), or, where code generation runs all of that loop's rows in one
    block (``row_block``: jammed, or innermost), the next loop's (``next_invariant_reads``: a
    product's activations, read again for every block of weight rows)."""
    rows = next((trips for trips in c.get("parallel_dims", []) if trips > 1), 1)
    if rows > 1 and c.get("row_block", 1) >= rows and "next_invariant_reads" in c:
        return c["next_invariant_reads"]
    return c.get("outer_invariant_reads", [])


def rereads(c: dict, read: dict[str, int], capacity: int, line: int) -> int:
    """Lines a nest reads again inside itself: the buffers its outermost parallel loop does
    not address (extract's ``outer_invariant_reads``) are read once per iteration of that
    loop, or per ``row_block`` iterations where code generation jammed that many rows
    (``program.nest_candidates``), and come from memory again each time when one pass's data
    does not fit in the cache (a GEMM of several rows whose weight is larger than the cache).
    Where all the rows run in one block and the columns in blocks of ``column_block`` (packed
    panels), ``_column_rereads``.
    ``read``: the bytes it reads of each buffer (``extents``)."""
    invariant = c.get("outer_invariant_reads", [])
    dims = [trips for trips in c.get("parallel_dims", []) if trips > 1]
    rows = dims[0] if dims else 1
    block = min(c.get("row_block", 1), rows)  # rows the code reads them once for
    passes = -(-rows // block)
    if passes == 1 and "column_block" in c and len(dims) == 2:  # (a batch's: not modelled)
        return _column_rereads(c, read, -(-dims[1] // c["column_block"]), capacity, line)
    if passes == 1 or not invariant:
        return 0
    fixed = sum(read[b] for b in invariant)
    varying = sum(size for b, size in {**read, **c["writes"]}.items() if b not in invariant)
    if fixed + varying * block / rows <= capacity:
        return 0
    return (passes - 1) * sum(-(-read[b] // line) for b in invariant)


def _column_rereads(c: dict, read: dict[str, int], passes: int, capacity: int,
                    line: int) -> int:
    """``rereads`` where all the rows run in one block and the columns in ``passes`` blocks
    (packed panels, ``pimbuild.codegen.panels``): what the columns do not address (x, extract's
    ``next_invariant_reads``) is read once per block of columns, and of it, per pass, what
    that pass's share of the rest pushes past the cache comes from memory again: all of it
    once x alone is past the cache. (``matmul`` n = 1024, x = 4 MiB past a 2 MiB L2:
    4,325,376 read misses, valgrind 4,326,114; docs/design.md §8.)"""
    invariant = c.get("next_invariant_reads", [])
    if passes == 1 or not invariant:
        return 0
    fixed = sum(read[b] for b in invariant)
    varying = sum(size for b, size in {**read, **c["writes"]}.items() if b not in invariant)
    past = fixed if fixed > capacity else max(0, fixed + varying / passes - capacity)
    return (passes - 1) * int(-(-past // line))


class _Lru:
    """Whole buffers, least recently used first, holding at most ``capacity`` bytes. A
    buffer of ``capacity`` bytes or more streams through: it is not held, and of everything
    else only what the streaming nest reads in every iteration of its repeating loop
    (``kept``, ``repeated``: a matrix-vector product's vector) stays; the rest was touched
    once, early, and is evicted by the stream. A buffer read only through views
    (``read_views``) is held as those views: reading another view of it misses."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held: OrderedDict[str, int] = OrderedDict()
        self.parts: dict[str, dict[str, int]] = {}  # held buffers only some views of

    def resident(self, name: str, size: int, views: dict[str, int] | None) -> int:
        """Bytes of ``size`` read of buffer ``name`` (through ``views``) that are held."""
        held = self.held.get(name, 0)
        if views and name in self.parts:
            return min(held, sum(b for k, b in views.items() if k in self.parts[name]))
        return min(held, size)

    def nest(self, reads: dict[str, int], writes: dict[str, int], line: int,
             kept: list[str], views: dict[str, dict[str, int]] | None = None
             ) -> tuple[int, int]:
        """One nest: the lines it reads, then writes, that were not resident (of a buffer
        partly resident, the bytes past what is; of a buffer it also reads, the bytes past
        those). ``views``: extract's ``read_views``."""
        views = views or {}
        missed = []
        for buffers, through in ((reads, views), (writes, {})):
            # a line the nest reads before it writes it is there when written (y += ...),
            # even when y streams: only the bytes past those it read can miss
            read_first = reads if buffers is writes else {}
            missed.append(sum(-(-max(0, size - self.resident(name, size, through.get(name))
                                     - read_first.get(name, 0)) // line)
                              for name, size in buffers.items()))
            for name, size in buffers.items():
                had = self.held.pop(name, 0)
                if name in through and (name in self.parts or not had):
                    self.parts[name] = {**self.parts.get(name, {}), **through[name]}
                    size = sum(self.parts[name].values())
                else:
                    self.parts.pop(name, None)
                    size = max(size, had)
                if size < self.capacity:
                    self.held[name] = size
        if any(size >= self.capacity for size in {**reads, **writes}.values()):
            self.held = OrderedDict((k, v) for k, v in self.held.items() if k in kept)
        while sum(self.held.values()) > self.capacity:
            self.held.popitem(last=False)
        self.parts = {k: v for k, v in self.parts.items() if k in self.held}
        return missed[0], missed[1]
