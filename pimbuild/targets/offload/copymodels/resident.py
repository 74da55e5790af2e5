"""Copy model ``resident``: a buffer moves only when the side about to use it does not hold
its latest version; outputs left on the device are flushed at the end."""

from __future__ import annotations

from pimbuild.targets.offload.nests import Nest


def copies(nests: list[Nest], offloaded: set[int], outputs: set[str]) -> tuple[int, int]:
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
