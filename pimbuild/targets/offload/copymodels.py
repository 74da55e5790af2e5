"""Copy models: the bytes a placement moves between the host and the device, per forward.

A copy model is ``f(nests, offloaded, outputs) -> (fetch_bytes, flush_bytes)``; buffers are
identified by allocation. ``sim.copy_model`` names one in ``COPY_MODELS`` (or
``package.module:function``).

- ``upper_bound`` (paper eq. 8): each segment (maximal run of consecutive offloaded nests)
  fetches every buffer it reads before writing it and flushes every buffer it writes, per
  execution.
- ``resident``: a buffer moves only when the side about to use it does not hold its latest
  version; outputs left on the device are flushed at the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from pimbuild.core.registry import Registry
from pimbuild.targets.offload.nests import Nest

COPY_MODELS = Registry("copy model", "sim.copy_model", builtins={
    "upper_bound": "pimbuild.targets.offload.copymodels:upper_bound",
    "resident": "pimbuild.targets.offload.copymodels:resident",
})


def runs(order: list[tuple[int, str]], offloaded: set[int]) -> list[list[int]]:
    """Maximal runs of consecutive offloaded ids of one scope (a loop's body, or the
    function's): ``order`` is every nest's (id, scope) in program order. The segments of the
    model (``segments``) and of the program reinsert builds (``outline.reinsert``)."""
    found: list[list[int]] = []
    current: list[int] = []
    scope = None
    for ident, where in order:
        if current and where != scope:
            found.append(current)
            current = []
        scope = where
        if ident in offloaded:
            current.append(ident)
        elif current:
            found.append(current)
            current = []
    if current:
        found.append(current)
    return found


def segments(nests: list[Nest], offloaded: set[int]) -> list[list[Nest]]:
    """Maximal runs of consecutive offloaded nests of one scope, in program order."""
    by_id = {n.id: n for n in nests}
    return [[by_id[i] for i in run] for run in runs([(n.id, n.scope) for n in nests], offloaded)]


def upper_bound(nests: list[Nest], offloaded: set[int], outputs: set[str]) -> tuple[int, int]:
    """(fetch, flush) bytes per forward under eq. 8."""
    fetch = flush = 0
    for seg in segments(nests, offloaded):
        *_, (seg_fetch, seg_flush) = segment_bytes(seg)
        fetch += seg_fetch
        flush += seg_flush
    return fetch, flush


def segment_bytes(seg: Iterable[Nest]) -> Iterator[tuple[int, int]]:
    """Eq. 8's (fetch, flush) bytes per forward of one segment, after each of its nests in
    turn: for the segment ``nests[k:l + 1]``, the values for l = k, k + 1, ... (the segment
    fetches every buffer it reads before writing it and flushes every buffer it writes, as
    often as its first nest runs). ``policy=joint`` extends segments one nest at a time."""
    written: set[str] = set()
    fetched: dict[str, int] = {}
    flushed: dict[str, int] = {}
    fetch = flush = 0
    executions = 1
    for i, n in enumerate(seg):
        if i == 0:
            executions = max(n.invocations, 1)
        for alloc, size in n.reads.items():
            if alloc not in written:
                fetch += size - fetched.get(alloc, 0)
                fetched[alloc] = size
        for alloc, size in n.writes.items():
            written.add(alloc)
            flush += size - flushed.get(alloc, 0)
            flushed[alloc] = size
        yield executions * fetch, executions * flush


def resident(nests: list[Nest], offloaded: set[int], outputs: set[str]) -> tuple[int, int]:
    """(fetch, flush) bytes per forward when buffers stay where they were last written."""
    host, device = "host", "device"
    latest: dict[str, str] = {}  # allocation -> host | device | both; default host
    fetch = flush = 0
    size: dict[str, int] = {}
    for n in nests:
        side = device if n.id in offloaded else host
        times = max(n.invocations, 1)
        for alloc, nbytes in n.reads.items():
            size[alloc] = nbytes
            held = latest.get(alloc, host)
            if side == device and held == host:
                fetch += times * nbytes
                latest[alloc] = "both"
            elif side == host and held == device:
                flush += times * nbytes
                latest[alloc] = "both"
        for alloc, nbytes in n.writes.items():
            size[alloc] = nbytes
            latest[alloc] = side
    flush += sum(size[a] for a, held in latest.items() if held == device and a in outputs)
    return fetch, flush
