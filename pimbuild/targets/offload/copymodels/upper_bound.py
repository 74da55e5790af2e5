"""Copy model ``upper_bound`` (paper eq. 8): each segment (maximal run of consecutive
offloaded nests) fetches every buffer it reads before writing it and flushes every buffer it
writes, per execution."""

from __future__ import annotations

from pimbuild.targets.offload.copymodels import segment_bytes, segments
from pimbuild.targets.offload.nests import Nest


def copies(nests: list[Nest], offloaded: set[int], outputs: set[str]) -> tuple[int, int]:
    """(fetch, flush) bytes per forward under eq. 8."""
    fetch = flush = 0
    for seg in segments(nests, offloaded):
        *_, (seg_fetch, seg_flush) = segment_bytes(seg)
        fetch += seg_fetch
        flush += seg_flush
    return fetch, flush
