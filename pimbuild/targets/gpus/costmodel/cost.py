"""The cost model every planner optimizes and every check evaluates (docs/design.md §10).

``times[k][d]``: seconds of kernel ``k`` on device ``d`` (profile). A transfer of ``n`` bytes
costs ``link.latency + n / link.bandwidth`` (``Link.seconds``).

- ``cycle_time``: the steady-state time per forward when requests are pipelined (FluidGPU's
  throughput objective): the busiest of every device's compute plus ``comm_on_device`` times the
  transfers it sends and receives, and every device's link direction (bytes out, bytes in).
  ``turns_cycle_time``: the same, averaged over placements that requests take in turn.
- ``critical_path``: one forward's latency: each device runs its kernels in program order
  (one compute stream per request), a kernel starts when the kernel before it on its device has
  finished and every buffer it reads has arrived (a transfer on a cut edge starts when its
  writer finishes). Transfers run on their own stream and do not queue behind each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from pimbuild.targets.gpus.costmodel.ddg import HOME, Graph, transfers


@dataclass(frozen=True)
class Link:
    gbps: float
    latency_us: float

    def seconds(self, nbytes: int) -> float:
        return self.latency_us * 1e-6 + nbytes * 8 / (self.gbps * 1e9)


def loads(g: Graph, place: list[int], times: list[list[float]], link: Link, n_dev: int,
          comm_on_device: float) -> dict[str, list[float]]:
    """Per device: compute seconds, seconds sent, seconds received."""
    compute = [0.0] * n_dev
    for k, d in enumerate(place):
        compute[d] += times[k][d]
    sent, received = [0.0] * n_dev, [0.0] * n_dev
    for _, src, dst, size in transfers(g, place):
        sent[src] += link.seconds(size)
        received[dst] += link.seconds(size)
    busy = [compute[d] + comm_on_device * (sent[d] + received[d]) for d in range(n_dev)]
    return {"compute": compute, "sent": sent, "received": received, "busy": busy}


def load_vector(g: Graph, place: list[int], times: list[list[float]], link: Link,
                n_dev: int, comm_on_device: float) -> list[float]:
    """``loads``' busy, sent and received seconds of every device, in one list: the cycle
    time is its largest entry."""
    lo = loads(g, place, times, link, n_dev, comm_on_device)
    return lo["busy"] + lo["sent"] + lo["received"]


def cycle_time(g: Graph, place: list[int], times: list[list[float]], link: Link, n_dev: int,
               comm_on_device: float) -> float:
    return max(load_vector(g, place, times, link, n_dev, comm_on_device))


def turns_cycle_time(g: Graph, places: list[list[int]], times: list[list[float]], link: Link,
                     n_dev: int, comm_on_device: float) -> float:
    """The cycle time when successive requests take ``places`` in turn (a stage replicated on
    devices that take alternate requests): every device's and link direction's load
    averaged over the turns, the busiest of them. ``cycle_time`` for one placement."""
    vectors = [load_vector(g, p, times, link, n_dev, comm_on_device) for p in places]
    return max(sum(column) / len(vectors) for column in zip(*vectors, strict=True))


def critical_path(g: Graph, place: list[int], times: list[list[float]], link: Link,
                  n_dev: int) -> float:
    finish: list[float] = []
    free = [0.0] * n_dev
    for k in range(len(g.kernels)):
        d = place[k]
        start = free[d]
        for src, b in g.predecessors(k):
            if src is None:  # enters at home
                src_dev, ready = HOME, 0.0
            elif src >= k:  # carried from the previous layer, which has ended
                src_dev, ready = place[src], 0.0
            else:
                src_dev, ready = place[src], finish[src]
            if src_dev != d:
                ready += link.seconds(g.buffer_bytes[b])
            start = max(start, ready)
        finish.append(start + times[k][d])
        free[d] = finish[-1]
    end = max(finish, default=0.0)
    for b in g.outputs:  # results travel home
        src = g.source(b)
        if src is not None and place[src] != HOME:
            end = max(end, finish[src] + link.seconds(g.buffer_bytes[b]))
    return end
