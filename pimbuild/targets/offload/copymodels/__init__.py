"""Copy models: the bytes a placement moves between the host and the device, per forward.

A copy model is a module of this package with ``copies(nests, offloaded, outputs) ->
(fetch_bytes, flush_bytes)``; buffers are identified by allocation. ``sim.copy_model`` names
one in ``COPY_MODELS`` (or ``package.module:function``). One with options of its own declares
a dataclass ``Options`` in its module and takes ``copies(..., options=Options())``;
``sim.copy_model_options`` holds their values, checked like a config group. This package holds
what they share: the runs of offloaded nests (``runs``, ``segments``) and eq. 8's bytes of a
segment.

- ``upper_bound`` (paper eq. 8): each segment (maximal run of consecutive offloaded nests)
  fetches every buffer it reads before writing it and flushes every buffer it writes, per
  execution.
- ``resident``: a buffer moves only when the side about to use it does not hold its latest
  version; outputs left on the device are flushed at the end.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pimbuild.core.registry import Registry
from pimbuild.targets.offload.nests import Nest

COPY_MODELS = Registry("copy model", "sim.copy_model",
                       package="pimbuild.targets.offload.copymodels", attribute="copies",
                       options="sim.copy_model_options")


@dataclass(frozen=True)
class CopyModel:
    """A copy model as a simulation uses it: its name (``sim.copy_model``) and its Options
    (``sim.copy_model_options``, made by ``COPY_MODELS.options``; None: it declares none)."""

    name: str
    options: Any = None

    def copies(self, nests: list[Nest], offloaded: set[int], outputs: set[str]
               ) -> tuple[int, int]:
        """(fetch, flush) bytes per forward of the placement ``offloaded``."""
        return COPY_MODELS.call(self.name, self.options, nests, offloaded, outputs)


UPPER_BOUND = CopyModel("upper_bound")  # the paper's eq. 8


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
