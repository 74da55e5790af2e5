"""One forward under a placement as a timeline (``timeline=true``): eq. 9's terms laid out in
program order on the lanes of the host, the device, the copies and the switches, in the
Trace Event format (``pimbuild.core.trace``).

Eq. 9 adds its terms, so the schedule is serial: each host nest for its ``T_cpu``; each
segment of offloaded nests entered by a switch and a fetch, its nests for their device time,
left by a flush and a switch; the forward's time outside every nest at the end. A segment's
share of ``T_copy`` is its share of eq. 8's bytes (the copy model's total, apportioned), its
share of ``N_region * T_sw`` its share of the transitions, so that the spans add up to
``T_hybrid`` exactly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pimbuild.core.trace import Trace
from pimbuild.targets.offload.copymodels import CopyModel, segment_bytes, segments
from pimbuild.targets.offload.hybrid import hybrid
from pimbuild.targets.offload.nests import Nest, display_name

if TYPE_CHECKING:
    from pimbuild.targets.offload.protocol import OffloadTarget


def timeline(nests: list[Nest], offloaded: set[int], forward_s: float,
             target: OffloadTarget, copy_model: CopyModel, outputs: set[str]) -> Trace:
    b = hybrid(nests, offloaded, forward_s, target, copy_model, outputs)
    segs = segments(nests, offloaded)
    moved = [list(segment_bytes(s))[-1] for s in segs]
    total_bytes = sum(f + w for f, w in moved)
    runs = [max(s[0].invocations, 1) for s in segs]
    first = {s[0].id: i for i, s in enumerate(segs)}
    last = {s[-1].id: i for i, s in enumerate(segs)}
    trace, clock = Trace(), 0.0
    where = "forward"

    def put(lane: str, name: str, seconds: float, **args: object) -> None:
        nonlocal clock
        if seconds > 0:
            trace.span(where, lane, name, clock, seconds, **args)
        clock += seconds

    def copy(i: int, part: int, name: str) -> None:
        share = (moved[i][part] / total_bytes) if total_bytes else 0.0
        put("copy", name, b.t_copy_s * share, bytes=moved[i][part], segment=i)

    def switch(i: int, name: str) -> None:
        put("switch", name, b.t_switch_s * runs[i] / max(b.n_region, 1), segment=i,
            transitions=runs[i])

    for n in nests:
        name = f"{display_name(n.source_module, n.source_op)} #{n.id}"
        if n.id not in offloaded:
            put(target.host, name, n.t_cpu_s, nest=n.id)
            continue
        if n.id in first:
            switch(first[n.id], f"enter segment {first[n.id]}")
            copy(first[n.id], 0, f"fetch {first[n.id]}")
        put(target.device, name, target.unit_time(n), nest=n.id)
        if n.id in last:
            copy(last[n.id], 1, f"flush {last[n.id]}")
            switch(last[n.id], f"leave segment {last[n.id]}")
    put(target.host, "outside the nests", b.t_cpu_only_s - sum(n.t_cpu_s for n in nests))
    return trace
