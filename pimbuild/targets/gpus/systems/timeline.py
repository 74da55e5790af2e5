"""The GPU target's timelines (``timeline=true``), in the Trace Event format
(``pimbuild.core.trace``): what the discrete-event simulation did, kernel by kernel (or, in
the serving simulation, forward segment by segment) on every device, transfer by transfer
on every link direction, request by request, with the online monitor's switches.

- ``forwards``: ``depth`` forwards of the planned placement started together and pipelined
  (the throughput the planner plans for), each kernel its own span;
- ``served``: the planned system serving the configured requests (prefill + decode), each
  request's wait and prefill, then its decode, on a lane of its own.
"""

from __future__ import annotations

from typing import Any

from pimbuild.core.trace import Trace
from pimbuild.targets.gpus.costmodel.cost import Link
from pimbuild.targets.gpus.costmodel.ddg import Graph
from pimbuild.targets.gpus.systems import serving
from pimbuild.targets.gpus.systems.engine import Server


def _draw(server: Server, names: list[str]) -> Trace:
    trace = Trace()
    for (kind, a, b, start, end), label in zip(server.intervals or [], server.labels,
                                                strict=True):
        if kind == "gpu":
            trace.span("devices", names[a], label, start, end - start, "kernel")
        else:
            trace.span("links", f"{names[a]} -> {names[b]}", label, start, end - start,
                       "transfer")
    return trace


def forwards(graph: Graph, place: list[int], times: list[list[float]], link: Link,
             names: list[str], layers: int, depth: int) -> Trace:
    server = Server(graph, place, times, link, len(names), layers, depth)
    server.intervals = []
    result = server.run([0.0] * depth)
    trace = _draw(server, names)
    for i, r in enumerate(result.requests):
        trace.span("requests", f"forward {i}", f"forward {i}", r.start, r.finish - r.start,
                   "request")
    return trace


def served(system: Any, requests: list[Any], kv: dict[str, str], link: Link, batch: int,
           depth: int, monitor: Any, names: list[str]) -> Trace:
    start = "throughput" if "throughput" in system.plans else next(iter(system.plans))
    server = serving.Serving(system.plans, kv, link, system.n_dev, batch, depth, monitor,
                             start)
    outcome = server.serve(requests)
    trace = _draw(server, names)
    for t in outcome.requests:
        lane, arrival = f"request {t.order}", t.request.arrival_s
        if t.first_token >= 0:
            trace.span("requests", lane, "wait + prefill", arrival, t.first_token - arrival,
                       "request", input_tokens=t.request.input_tokens)
        if t.finish >= 0:
            trace.span("requests", lane, "decode", t.first_token, t.finish - t.first_token,
                       "request", output_tokens=t.generated)
    for at, mode in server.marks:
        trace.instant("monitor", "placement", f"switch to {mode}", at)
    return trace
