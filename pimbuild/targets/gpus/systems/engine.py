"""Discrete-event simulation of requests flowing through a placed kernel graph (``simpy``):
the engine of the GPU target's serving simulation (docs/design.md §10).

Every request runs ``layers`` copies of the layer graph in program order. As in FluidGPU's
workers (§III-C), a request has its own compute stream on every device (its kernels on one
device run in order), a kernel waits for the buffers it reads (a buffer on another device
arrives over the link after its writer finishes), and the kernels of different requests
contend for each device; with ``priorities`` the earlier request goes first (FluidGPU's
priority stream pool), else the first to ask. At most ``depth`` requests are in flight (the
pool's size); the others queue in arrival order. A transfer holds the link direction it uses
(``link_contention``) or, without it, only takes its time (the ``critical_path`` model).

State inputs (``Recipe.state``: a KV cache) are resident on every device that reads them.
``segments`` and ``forward_segments`` run a forward as runs of kernels between transfers,
one event each (exactly as kernel by kernel for an isolated forward). Serving prefill and
decode with continuous batching, KV-cache deltas and the online monitor is built on this
engine in ``pimbuild.targets.gpus.systems.serving``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import simpy

from pimbuild.targets.gpus.costmodel.cost import Link
from pimbuild.targets.gpus.costmodel.ddg import HOME, Graph, transfers


@dataclass
class Forward:
    """One forward to run: a layer graph, its placement and kernel times, ``layers`` copies
    in sequence, every kernel and transfer time multiplied by ``scale`` (``layers=1,
    scale=L``: L identical layers simulated once), at ``priority`` (lower goes first)."""

    graph: Graph
    place: list[int]
    times: list[list[float]]
    layers: int = 1
    priority: int = 0
    scale: float = 1.0
    kernels: int = 0  # kernels run so far


@dataclass
class Served:
    arrival: float
    start: float = 0.0  # when it entered the pipeline
    finish: float = 0.0
    kernels: int = 0


@dataclass
class Result:
    requests: list[Served]
    busy: list[float]  # seconds each device computed
    end: float  # when the last request finished
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def latencies(self) -> list[float]:
        return [r.finish - r.arrival for r in self.requests]

    def summary(self) -> dict[str, float]:
        """Requests per second over the run, mean and P50 / P99 latency, and each device's
        share of the run spent computing."""
        lat = sorted(self.latencies)
        return {"requests_per_s": len(lat) / self.end if self.end else 0.0,
                "mean_latency_s": sum(lat) / len(lat) if lat else 0.0,
                "p50_latency_s": percentile(lat, 50), "p99_latency_s": percentile(lat, 99),
                **{f"busy_share_{d}": b / self.end if self.end else 0.0
                   for d, b in enumerate(self.busy)}}


def percentile(ordered: list[float], q: float) -> float:
    """The ``q``-th percentile of sorted values (nearest rank: a value that occurred)."""
    if not ordered:
        return 0.0
    rank = max(1, -(-len(ordered) * q // 100))  # ceil(n q / 100)
    return ordered[int(rank) - 1]


class Server:
    def __init__(self, graph: Graph, place: list[int], times: list[list[float]], link: Link,
                 n_dev: int, layers: int = 1, depth: int = 1, priorities: bool = True,
                 link_contention: bool = True) -> None:
        self.g, self.place, self.times, self.link = graph, place, times, link
        self.n_dev, self.layers, self.priorities = n_dev, layers, priorities
        self.env = simpy.Environment()
        self.devices = [simpy.PriorityResource(self.env, capacity=1) for _ in range(n_dev)]
        self.links = {(a, b): simpy.PriorityResource(self.env, capacity=1)
                      for a in range(n_dev) for b in range(n_dev) if a != b} \
            if link_contention else {}
        self.pool = simpy.Resource(self.env, capacity=depth)
        self.busy = [0.0] * n_dev
        self.intervals: list[tuple[str, int, int, float, float]] | None = None
        self.labels: list[str] = []  # what each interval is (a kernel's name, a transfer's size)

    def _transfer(self, nbytes: int, src: int, dst: int, after: simpy.Event,
                  arrived: simpy.Event, scale: float = 1.0, priority: int = 0):
        yield after
        seconds = scale * self.link.seconds(nbytes)
        if (src, dst) in self.links:
            with self.links[src, dst].request(priority=priority) as slot:
                yield slot
                self.record("link", src, dst, seconds, f"{nbytes / 1e6:.3g} MB")
                yield self.env.timeout(seconds)
        else:
            yield self.env.timeout(seconds)
        arrived.succeed()

    def record(self, kind: str, a: int, b: int, seconds: float, label: str = "") -> None:
        """A compute (kind "gpu", device a) or transfer (a -> b) interval starting now; kept
        only when ``self.intervals`` is a list (the serving simulation's time breakdown, a
        timeline)."""
        if self.intervals is not None:
            self.intervals.append((kind, a, b, self.env.now, self.env.now + seconds))
            self.labels.append(label or kind)

    def _ready(self, f: Forward, buffer: str, src: int | None, device: int,
               done: dict[int, simpy.Event], carried: dict[str, simpy.Event],
               sent: dict[tuple[str, int], simpy.Event]) -> simpy.Event:
        """The event of ``buffer`` being on ``device`` for this kernel."""
        if buffer in f.graph.state:  # a KV cache or recurrent state: a replica is resident
            return self.env.event().succeed()
        if src is None or (buffer in f.graph.carry and buffer not in carried):
            written, src_dev = self.env.event().succeed(), HOME  # enters with the request
        elif buffer in carried:  # written by the previous layer
            written, src_dev = carried[buffer], f.place[src]
        else:
            written, src_dev = done[src], f.place[src]
        if src_dev == device:
            return written
        key = (buffer, device)
        if key not in sent:  # one transfer per buffer and receiving device
            sent[key] = self.env.event()
            self.env.process(self._transfer(f.graph.buffer_bytes[buffer], src_dev, device,
                                            written, sent[key], f.scale, f.priority))
        return sent[key]

    def _kernel(self, f: Forward, k: int, waits: list[simpy.Event], done: simpy.Event):
        d = f.place[k]
        yield simpy.AllOf(self.env, waits)
        with self.devices[d].request(priority=f.priority if self.priorities else 0) as gpu:
            yield gpu
            seconds = f.scale * f.times[k][d]
            self.record("gpu", d, d, seconds, f.graph.kernels[k].name)
            yield self.env.timeout(seconds)
            self.busy[d] += seconds
        f.kernels += 1
        done.succeed()

    def forward(self, f: Forward):
        """One forward of ``f.layers`` layers: every kernel of every layer is its own process,
        waiting on the kernel before it on its device (the forward's stream there) and on the
        buffers it reads; done when every stream and every result sent home is."""
        g = f.graph
        last = [self.env.event().succeed() for _ in range(self.n_dev)]
        carried: dict[str, simpy.Event] = {}
        done: dict[int, simpy.Event] = {}
        for _ in range(f.layers):
            done = {k: self.env.event() for k in range(len(g.kernels))}
            sent: dict[tuple[str, int], simpy.Event] = {}
            for k in range(len(g.kernels)):
                d = f.place[k]
                waits = [last[d]] + [self._ready(f, b, src, d, done, carried, sent)
                                     for src, b in g.predecessors(k)]
                self.env.process(self._kernel(f, k, waits, done[k]))
                last[d] = done[k]
            # the next layer reads the carried results of this one
            carried = {b: done[g.producer[out]] for b, out in g.carry.items()
                       if out in g.producer and b not in g.state}
        tail = [self._ready(f, b, g.source(b), HOME, done, {}, {})
                for b in g.outputs if g.source(b) is not None]
        yield simpy.AllOf(self.env, [*last, *tail])

    def forward_segments(self, segs: list[Segment], home: list[tuple[int, int, int]],
                         priority: int = 0, scale: float = 1.0, label: str = "segment"):
        """One forward as ``segments``: a device held once per segment, a transfer per
        receive; the same as ``forward`` for an isolated forward, coarser under contention
        (another forward's kernels cannot slip in between a segment's)."""
        done = [self.env.event() for _ in segs]
        for i, seg in enumerate(segs):
            waits = [done[j] for j in seg.after]
            for j, src, dst, nbytes in seg.receives:
                arrived = self.env.event()
                self.env.process(self._transfer(
                    nbytes, src, dst, done[j] if j >= 0 else self.env.event().succeed(),
                    arrived, scale, priority))
                waits.append(arrived)
            self.env.process(self._segment(seg, waits, done[i], priority, scale, label))
        tail = []
        for j, src, nbytes in home:
            arrived = self.env.event()
            self.env.process(self._transfer(nbytes, src, HOME, done[j], arrived, scale,
                                            priority))
            tail.append(arrived)
        yield simpy.AllOf(self.env, [*done, *tail])

    def _segment(self, seg: Segment, waits: list[simpy.Event], done: simpy.Event,
                 priority: int, scale: float, label: str = "segment"):
        yield simpy.AllOf(self.env, waits)
        with self.devices[seg.device].request(
                priority=priority if self.priorities else 0) as gpu:
            yield gpu
            seconds = scale * seg.seconds
            self.record("gpu", seg.device, seg.device, seconds, label)
            yield self.env.timeout(seconds)
            self.busy[seg.device] += seconds
        done.succeed()

    def _request(self, order: int, served: Served):
        with self.pool.request() as slot:
            yield slot
            served.start = self.env.now
            f = Forward(self.g, self.place, self.times, self.layers, order)
            yield self.env.process(self.forward(f))
            served.kernels = f.kernels
            served.finish = self.env.now

    def _arrive(self, order: int, served: Served):
        yield self.env.timeout(served.arrival)
        yield self.env.process(self._request(order, served))

    def run(self, arrivals: list[float]) -> Result:
        requests = [Served(a) for a in sorted(arrivals)]
        for order, served in enumerate(requests):
            self.env.process(self._arrive(order, served))
        self.env.run()
        return Result(requests, self.busy, max((r.finish for r in requests), default=0.0))


@dataclass(frozen=True)
class Segment:
    """A run of kernels on one device, in program order, that waits only at its start (for
    the segment before it on its device and for transfers) and sends only at its end."""

    device: int
    seconds: float
    after: tuple[int, ...]  # segments it follows (the previous one on its device)
    receives: tuple[tuple[int, int, int, int], ...]  # (segment, from dev, to dev, bytes)


def segments(g: Graph, place: list[int], times: list[list[float]]) -> tuple[
        list[Segment], list[tuple[int, int, int]]]:
    """One forward of a layer as segments, and the transfers home at its end: (segment,
    from dev, bytes). A segment ends after a kernel whose result another device reads and
    before a kernel that reads a buffer from another device, so an isolated forward runs
    exactly as kernel by kernel. State inputs are resident; inputs and carried buffers
    enter from home."""
    segs: list[dict] = []
    open_seg: dict[int, int] = {}  # device -> its open segment
    last_seg: dict[int, int] = {}
    where: dict[str, int] = {}  # buffer -> the segment that wrote it
    sent_out = {b for b, s, d, _ in transfers(g, place)}
    arrived: dict[tuple[str, int], bool] = {}
    for k, kernel in enumerate(g.kernels):
        d = place[k]
        incoming = []
        for src, b in g.predecessors(k):
            if b in g.state:
                continue
            src_dev = HOME if src is None or b not in where else place[src]
            if src_dev != d and (b, d) not in arrived:
                arrived[b, d] = True
                incoming.append((where.get(b, -1), src_dev, d, g.buffer_bytes[b]))
        if d not in open_seg or incoming:
            segs.append({"device": d, "seconds": 0.0,
                         "after": (last_seg[d],) if d in last_seg else (),
                         "receives": tuple(incoming)})
            open_seg[d] = last_seg[d] = len(segs) - 1
        segs[open_seg[d]]["seconds"] += times[k][d]
        for b in kernel.writes:
            where[b] = open_seg[d]
        if any(b in sent_out for b in kernel.writes):
            del open_seg[d]  # the next kernel on d starts a new segment
    home = [(where[b], place[g.source(b)], g.buffer_bytes[b]) for b in g.outputs
            if g.source(b) is not None and place[g.source(b)] != HOME]
    return [Segment(**s) for s in segs], home
