"""Discrete-event simulation of requests flowing through a placed kernel graph (``simpy``):
the first part of the GPU target's serving simulation (issue 12; docs/design.md §10).

Every request runs ``layers`` copies of the layer graph in program order. As in FluidGPU's
workers (§III-C), a request has its own compute stream on every device (its kernels on one
device run in order), a kernel waits for the buffers it reads (a buffer on another device
arrives over the link after its writer finishes), and the kernels of different requests
contend for each device; with ``priorities`` the earlier request goes first (FluidGPU's
priority stream pool), else the first to ask. At most ``depth`` requests are in flight (the
pool's size); the others queue in arrival order. A transfer holds the link direction it uses
(``link_contention``) or, without it, only takes its time (the ``critical_path`` model).

State inputs (``Recipe.state``: a KV cache) are resident on every device that reads them.
Not yet here: KV-cache deltas on their own traffic class, continuous batching, the online
monitor, arrival processes (the caller gives arrival times).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import simpy

from pimbuild.gpus.cost import Link
from pimbuild.gpus.ddg import HOME, Graph


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
        self.links = {(a, b): simpy.Resource(self.env, capacity=1)
                      for a in range(n_dev) for b in range(n_dev) if a != b} \
            if link_contention else {}
        self.pool = simpy.Resource(self.env, capacity=depth)
        self.busy = [0.0] * n_dev

    def _transfer(self, nbytes: int, src: int, dst: int, after: simpy.Event,
                  arrived: simpy.Event):
        yield after
        if (src, dst) in self.links:
            with self.links[src, dst].request() as slot:
                yield slot
                yield self.env.timeout(self.link.seconds(nbytes))
        else:
            yield self.env.timeout(self.link.seconds(nbytes))
        arrived.succeed()

    def _ready(self, buffer: str, src: int | None, device: int, done: dict[int, simpy.Event],
               carried: dict[str, simpy.Event], sent: dict[tuple[str, int], simpy.Event]
               ) -> simpy.Event:
        """The event of ``buffer`` being on ``device`` for this kernel."""
        if buffer in self.g.state:  # a KV cache or recurrent state: a replica is resident
            return self.env.event().succeed()
        if src is None or (buffer in self.g.carry and buffer not in carried):
            written, src_dev = self.env.event().succeed(), HOME  # enters with the request
        elif buffer in carried:  # written by the previous layer
            written, src_dev = carried[buffer], self.place[src]
        else:
            written, src_dev = done[src], self.place[src]
        if src_dev == device:
            return written
        key = (buffer, device)
        if key not in sent:  # one transfer per buffer and receiving device
            sent[key] = self.env.event()
            self.env.process(self._transfer(self.g.buffer_bytes[buffer], src_dev, device,
                                            written, sent[key]))
        return sent[key]

    def _kernel(self, k: int, d: int, order: int, waits: list[simpy.Event],
                done: simpy.Event, served: Served):
        yield simpy.AllOf(self.env, waits)
        with self.devices[d].request(priority=order if self.priorities else 0) as gpu:
            yield gpu
            yield self.env.timeout(self.times[k][d])
            self.busy[d] += self.times[k][d]
        served.kernels += 1
        done.succeed()

    def _request(self, order: int, served: Served):
        """Every kernel of every layer is its own process, waiting on the kernel before it on
        its device (the request's stream there) and on the buffers it reads."""
        with self.pool.request() as slot:
            yield slot
            served.start = self.env.now
            last = [self.env.event().succeed() for _ in range(self.n_dev)]
            carried: dict[str, simpy.Event] = {}
            done: dict[int, simpy.Event] = {}
            for _ in range(self.layers):
                done = {k: self.env.event() for k in range(len(self.g.kernels))}
                sent: dict[tuple[str, int], simpy.Event] = {}
                for k in range(len(self.g.kernels)):
                    d = self.place[k]
                    waits = [last[d]] + [self._ready(b, src, d, done, carried, sent)
                                         for src, b in self.g.predecessors(k)]
                    self.env.process(self._kernel(k, d, order, waits, done[k], served))
                    last[d] = done[k]
                # the next layer reads the carried results of this one
                carried = {b: done[self.g.producer[out]] for b, out in self.g.carry.items()
                           if out in self.g.producer and b not in self.g.state}
            tail = [self._ready(b, self.g.source(b), HOME, done, {}, {})
                    for b in self.g.outputs if self.g.source(b) is not None]
            yield simpy.AllOf(self.env, [*last, *tail])
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
