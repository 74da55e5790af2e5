"""Counter backend ``footprint``: the counts of the ``valgrind`` backend, modelled from the
buffers each nest reads and writes, with no run under a simulator.

Extract lists, per nest, the buffers it reads and writes (``reads`` / ``writes``: allocation ->
bytes). The cache is the platform's last level as the valgrind backend configures it
(``profile.valgrind_last_level``: the LLC, or the core's L2), held as a least-recently-used
list of whole buffers, walked in program order: a nest's ``offcore_data_rd`` is the lines of
the buffers it reads that are not resident when it starts, its ``ll_write_misses`` the lines
of those it writes that are not; then all of them are the most recent, and the least recent
are evicted past the capacity. The walk starts from an empty cache (one forward after a
flush) or, with ``profile.valgrind_warm``, counts the second of two forwards.

It models compulsory and capacity misses at the grain of whole buffers. Not in it: reuse
within one nest whose buffers exceed the cache (a large GEMM re-reading a panel), conflict
misses, a nest reading only part of a buffer through a view (it is charged the whole buffer),
hardware prefetching, and every access outside the candidate nests. docs/design.md §8 gives
its agreement with valgrind's counts and decisions (``bench/profile_cost.py``).

Why: on a host without hardware counters (a VM), valgrind is the only measurement, and
running one forward under it costs about 38 forwards before it counts anything; this backend
costs nothing beyond the timing run.
"""

from __future__ import annotations

from collections import OrderedDict

from pimbuild.counters import CounterRun

N_RD, WRITE_MISSES = "offcore_data_rd", "ll_write_misses"


def available(run: CounterRun | None = None) -> tuple[bool, str]:
    return True, "footprint: modelled from each nest's buffers (no run)"


def count(run: CounterRun) -> list[dict]:
    p = run.params
    capacity = p.l2_bytes if p.valgrind_last_level == "l2" else p.llc_bytes
    counts = footprint_counts(run.program.candidates, capacity, p.cache_line, p.valgrind_warm)
    return [{"id": c["id"], "source_op": c["source_op"], "counter_source": "footprint",
             "counts": counts[c["id"]]} for c in run.program.candidates]


def footprint_counts(candidates: list[dict], capacity: int, line: int, warm: bool = False
                     ) -> dict[int, dict[str, int]]:
    """Per nest id, ``{offcore_data_rd, ll_write_misses}`` for one forward (the second of
    two if ``warm``), from an LRU of whole buffers of ``capacity`` bytes."""
    cache = _Lru(capacity)
    counts = {}
    for _ in range(2 if warm else 1):
        for c in candidates:
            counts[c["id"]] = dict(zip((N_RD, WRITE_MISSES),
                                       cache.nest(c["reads"], c["writes"], line), strict=True))
    return counts


class _Lru:
    """Whole buffers, least recently used first, holding at most ``capacity`` bytes. A
    buffer of ``capacity`` bytes or more streams through: it is not held, and it evicts
    everything the nest streaming it does not touch."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.held: OrderedDict[str, int] = OrderedDict()

    def nest(self, reads: dict[str, int], writes: dict[str, int], line: int
             ) -> tuple[int, int]:
        """One nest: the lines it reads, then writes, that were not resident."""
        missed = []
        for buffers in (reads, writes):
            missed.append(sum(-(-size // line) for name, size in buffers.items()
                              if name not in self.held))
            for name, size in buffers.items():
                self.held.pop(name, None)
                if size < self.capacity:
                    self.held[name] = size
        touched = {**reads, **writes}
        if any(size >= self.capacity for size in touched.values()):
            self.held = OrderedDict((k, v) for k, v in self.held.items() if k in touched)
        while sum(self.held.values()) > self.capacity:
            self.held.popitem(last=False)
        return missed[0], missed[1]
