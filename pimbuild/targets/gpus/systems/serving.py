"""Serving requests on placed prefill and decode graphs: a discrete-event simulation on
``pimbuild.targets.gpus.systems.engine``'s engine (simpy), with continuous batching and FluidGPU's
online monitor (§III-C, §III-D, §V-B; issue 12; docs/design.md §10).

A request arrives, waits for a prefill forward (one request's prompt), which yields its first
token and its KV cache; the cache moves to the devices that read it in the decode placement.
Then it joins the decode batch: every decode forward advances each request in it by one
token (continuous batching: a request joins or leaves a batch between forwards, up to
``batch`` requests; up to ``batch x depth`` requests are admitted, so that ``depth`` full
batches can be in the pipeline). Up to ``depth`` forwards of each phase are in flight at
once (FluidGPU's stream pool). Where several devices serve a phase as instances of their own
(PD or AF on three or more devices: ``in_turn``), requests take them in turn, and each
instance has its own pool and its own decode batches. Earlier requests' forwards go first
on every device and link. After every decode forward its new keys and values (the graph's
``state`` results, in proportion to the requests in it) go to every other device holding a
replica of the cache, on a lower-priority traffic class than any forward's own transfers;
as in FluidGPU (§III-C), a request's next decode forward waits for its deltas (here: before
it starts, a conservative reading of "before a kernel reads the updated range").

Approximations, stated: a decode forward costs the decode recipe's time at its batch size
whatever the batch in it (an upper bound when fewer requests decode; at these batch sizes
decode reads weights, which do not grow with the batch); a prompt of another length than the
prefill recipe's scales the prefill's kernel times linearly; a forward of ``layers`` identical
layers is one layer's segments (``serve.segments``) with every time multiplied by ``layers``
(tests compare it with the layer-by-layer, kernel-by-kernel simulation).

The online monitor (``Monitor``): every ``window_s`` it compares the mean latency of the
requests finished in the window with their mean execution-only latency (prefill critical path
+ decode steps' critical paths, no queueing); above ``beta`` the next forwards use the
``throughput`` placements, else the ``latency`` ones; every switch stalls every device
``stall_s``.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field, replace
from typing import Any

import simpy

from pimbuild.core.errors import RecipeError
from pimbuild.targets.gpus.costmodel import cost
from pimbuild.targets.gpus.costmodel.cost import Link
from pimbuild.targets.gpus.costmodel.ddg import Graph, rename
from pimbuild.targets.gpus.systems import arrivals
from pimbuild.targets.gpus.systems.arrivals import Request, offline, poisson
from pimbuild.targets.gpus.systems.engine import Forward, Server, percentile, segments


@dataclass(frozen=True)
class Phase:
    """A phase's layer graph placed: kernel times, ``layers`` identical layers."""

    graph: Graph
    place: list[int]
    times: list[list[float]]
    layers: int
    tokens: int = 0  # a prefill's prompt tokens (Recipe.prompt; 0: not declared, no scaling)

    def forward(self, priority: int, stretch: float = 1.0) -> Forward:
        """Layer by layer, kernel by kernel (the reference the segments are tested against)."""
        return Forward(self.graph, self.place, self.times, self.layers, priority, stretch)

    def critical_path(self, link: Link, n_dev: int) -> float:
        return self.layers * cost.critical_path(self.graph, self.place, self.times, link,
                                                n_dev)


@dataclass(frozen=True)
class Plan:
    """How a system serves: the prefill and decode placements (both on ``n_dev`` devices)."""

    prefill: Phase
    decode: Phase

    def kv_moves(self, kv: dict[str, str]) -> list[tuple[int, int, int]]:
        """(from device, to device, bytes) of a prefilled request's KV cache: every prefill
        state result ``kv`` maps to the decode input it becomes; it goes wherever a decode
        kernel reads that input, from where the prefill wrote it."""
        pre = self.prefill
        return [move for out, cache in kv.items()
                for move in self._to_readers(cache, pre.place[pre.graph.producer[out]],
                                             pre.graph.buffer_bytes[out] * pre.layers)]

    def deltas(self) -> list[tuple[int, int, int]]:
        """(from, to, bytes) of one decode forward's new keys and values to the replicas."""
        dec = self.decode
        g = dec.graph
        return [move for cache, out in g.carry.items()
                if cache in g.state and out in g.producer
                for move in self._to_readers(cache, dec.place[g.producer[out]],
                                             g.buffer_bytes[out] * dec.layers)]

    def _to_readers(self, cache: str, src: int, nbytes: int) -> list[tuple[int, int, int]]:
        """(src, device, nbytes) to every other device where a decode kernel reads ``cache``."""
        dec = self.decode
        return [(src, d, nbytes)
                for d in sorted({dec.place[r] for r in dec.graph.readers.get(cache, ())})
                if d != src]


@dataclass
class Monitor:
    window_s: float
    beta: float
    stall_s: float


@dataclass
class Tracked:
    request: Request
    order: int
    first_token: float = -1.0
    finish: float = -1.0
    generated: int = 0
    execution_s: float = 0.0  # the request's forwards' critical paths, no queueing
    kv_synced: Any = None  # its last decode step's KV deltas have reached the replicas


@dataclass
class Outcome:
    requests: list[Tracked]
    end: float
    busy: list[float]
    forwards: dict[str, int]
    switches: int
    breakdown: list[dict[str, float]]  # per device: compute / waiting on comm / idle shares

    def summary(self) -> dict[str, float]:
        done = [t for t in self.requests if t.finish >= 0]
        tokens = sum(t.generated for t in done)
        start = min((t.request.arrival_s for t in self.requests), default=0.0)
        span = self.end - start
        ttft = sorted(t.first_token - t.request.arrival_s for t in done)
        tpot = sorted((t.finish - t.first_token) / (t.generated - 1) for t in done
                      if t.generated > 1)
        norm = sorted((t.finish - t.request.arrival_s) / t.generated for t in done)
        bottleneck = max(range(len(self.busy)), key=self.busy.__getitem__)
        return {"requests": len(done), "tokens_per_s": tokens / span if span else 0.0,
                "simulated_s": span, "mean_normalized_latency_s": mean(norm),
                "p50_normalized_latency_s": percentile(norm, 50),
                "p99_normalized_latency_s": percentile(norm, 99),
                "p50_ttft_s": percentile(ttft, 50), "p99_ttft_s": percentile(ttft, 99),
                "p50_tpot_s": percentile(tpot, 50), "p99_tpot_s": percentile(tpot, 99),
                "prefills": self.forwards["prefill"], "decode_steps": self.forwards["decode"],
                "mean_decode_batch": sum(t.generated - 1 for t in done)
                / self.forwards["decode"] if self.forwards["decode"] else 0.0,
                "switches": self.switches, "bottleneck_device": bottleneck,
                **{f"bottleneck_{k}_share": v for k, v in self.breakdown[bottleneck].items()}}


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


class Serving(Server):
    """Serve ``requests`` with ``plans`` ({"throughput": Plan, "latency": Plan}; one of them
    without a monitor; a tuple of plans takes the requests in turn, the n-th request served
    by the (n mod len)-th) on ``n_dev`` devices joined by ``link``."""

    def __init__(self, plans: dict[str, Plan], kv: dict[str, str], link: Link, n_dev: int,
                 batch: int, depth: int = 8, monitor: Monitor | None = None,
                 start: str | None = None, collapse_layers: bool = True) -> None:
        start = start or next(iter(plans))
        self.plans = {k: v if isinstance(v, tuple) else (v,) for k, v in plans.items()}
        first = self.plans[start][0]
        super().__init__(first.decode.graph, first.decode.place, first.decode.times, link,
                         n_dev, depth=depth)
        self.kv, self.batch, self.depth = kv, batch, depth
        self.monitor, self.current, self.collapse = monitor, start, collapse_layers
        self.intervals = []
        self.switches = 0
        self.marks: list[tuple[float, str]] = []  # the monitor's switches: (time, new mode)
        self.in_flight: Counter = Counter()  # forwards in flight, by (phase, placed Phase)
        self.forwards = {"prefill": 0, "decode": 0}
        self.wake = self.env.event()
        self.phases: dict[int, tuple] = {}  # id(phase) -> segments, home sends, critical path
        self.moves: dict[int, tuple] = {}  # id(plan) -> its KV-cache moves, its deltas

    def _prepared(self, phase: Phase) -> tuple:
        """A phase's segments and critical path, computed once: the plans do not change."""
        if id(phase) not in self.phases:
            segs, home = segments(phase.graph, phase.place, phase.times)
            self.phases[id(phase)] = (segs, home, phase.critical_path(self.link, self.n_dev))
        return self.phases[id(phase)]

    def _moves(self, plan: Plan) -> tuple:
        """A plan's KV-cache moves after a prefill and deltas after a decode forward, once."""
        if id(plan) not in self.moves:
            self.moves[id(plan)] = (plan.kv_moves(self.kv), plan.deltas())
        return self.moves[id(plan)]

    def _run(self, phase: Phase, priority: int, stretch: float = 1.0, label: str = "forward"):
        """One forward of ``phase``: its identical layers once, as segments (or, with
        ``collapse_layers=False``, layer by layer and kernel by kernel)."""
        if not self.collapse:
            return self.forward(phase.forward(priority, stretch))
        segs, home, _ = self._prepared(phase)
        return self.forward_segments(segs, home, priority, phase.layers * stretch, label)

    # -- the scheduler -------------------------------------------------------------------
    def _poke(self) -> None:
        if not self.wake.triggered:
            self.wake.succeed()

    def _arrival(self, t: Tracked, waiting: deque):
        yield self.env.timeout(t.request.arrival_s)
        waiting.append(t)
        self._poke()

    def _plan(self, t: Tracked) -> Plan:
        """The plan serving ``t`` in the current mode: several plans take requests in turn."""
        turns = self.plans[self.current]
        return turns[t.order % len(turns)]

    def _scheduler(self, tracked: list[Tracked], waiting: deque, ready: list[Tracked]):
        """Launch forwards while a placed phase has fewer than ``depth`` in flight (each
        phase, and each instance of it where plans take requests in turn, has its own pool,
        so a PD split's decode device never idles behind queued prefills). Up to ``batch x
        depth`` requests per decode instance are admitted at once (the pipeline holds
        ``depth`` full decode batches). A waiting request's prefill goes first while there
        is room; a decode forward takes the ``batch`` earliest ready requests of one decode
        instance once that many are ready, or whatever is ready there when no decode
        forward is in flight on it (a lightly loaded system still progresses)."""
        admitted = finished = 0
        while finished < len(tracked):
            while True:
                decoders = len({id(p.decode) for p in self.plans[self.current]})
                head = self._plan(waiting[0]).prefill if waiting else None
                if head is not None and admitted < self.batch * self.depth * decoders \
                        and self.in_flight["prefill", id(head)] < self.depth:
                    admitted += 1
                    self._launch("prefill", id(head), self._prefill(waiting.popleft(), ready))
                elif group := self._decodable(ready):
                    for t in group:
                        ready.remove(t)
                    self._launch("decode", id(self._plan(group[0]).decode),
                                 self._decode(group, ready))
                else:
                    break
            self.wake = self.env.event()
            yield self.wake
            admitted -= len(self.finished) - finished
            finished = len(self.finished)

    def _decodable(self, ready: list[Tracked]) -> list[Tracked]:
        """The next decode batch: the earliest ready requests of the first decode instance
        (in their earliest request's order) with a full batch, or with none in flight,
        that has room; empty when none does."""
        by_decoder: dict[int, list[Tracked]] = {}
        for t in sorted(ready, key=lambda r: r.order):
            by_decoder.setdefault(id(self._plan(t).decode), []).append(t)
        for key, queue in by_decoder.items():
            if (len(queue) >= self.batch or not self.in_flight["decode", key]) \
                    and self.in_flight["decode", key] < self.depth:
                return queue[:self.batch]
        return []

    def _launch(self, phase: str, instance: int, generator) -> None:
        self.in_flight[phase, instance] += 1
        self.forwards[phase] += 1

        def run():
            yield self.env.process(generator)
            self.in_flight[phase, instance] -= 1
            self._poke()
        self.env.process(run())

    # -- forwards --------------------------------------------------------------------------
    def _prefill(self, t: Tracked, ready: list[Tracked]):
        plan = self._plan(t)
        prompt, given = plan.prefill.tokens, t.request.input_tokens
        stretch = given / prompt if prompt and given else 1.0  # 0: the recipe's own prompt
        yield self.env.process(self._run(plan.prefill, t.order, stretch,
                                         f"prefill of request {t.order}"))
        t.execution_s += stretch * self._prepared(plan.prefill)[2]
        moves = [self._move(src, dst, size, t.order) for src, dst, size in self._moves(plan)[0]]
        yield simpy.AllOf(self.env, moves)
        t.first_token, t.generated = self.env.now, 1
        self._advance(t, ready)

    def _decode(self, group: list[Tracked], ready: list[Tracked]):
        plan = self._plan(group[0])
        order = min(t.order for t in group)
        # the previous step's KV deltas of these requests must have reached every replica
        yield simpy.AllOf(self.env, [t.kv_synced for t in group if t.kv_synced is not None])
        yield self.env.process(self._run(plan.decode, order, label=f"decode of {len(group)}"))
        step = self._prepared(plan.decode)[2]
        deltas = [self._move(src, dst, size * len(group) // max(1, self.batch),
                             order + BACKGROUND) for src, dst, size in self._moves(plan)[1]]
        synced = simpy.AllOf(self.env, deltas) if deltas else None
        for t in group:
            t.generated += 1
            t.execution_s += step
            t.kv_synced = synced
            self._advance(t, ready)

    def _advance(self, t: Tracked, ready: list[Tracked]) -> None:
        if t.generated >= t.request.output_tokens:
            t.finish = self.env.now
            self.finished.append(t)
        else:
            ready.append(t)

    def _move(self, src: int, dst: int, nbytes: int, priority: int) -> simpy.Event:
        arrived = self.env.event()
        self.env.process(self._transfer(nbytes, src, dst, self.env.event().succeed(), arrived,
                                        1.0, priority))
        return arrived

    # -- the online monitor ----------------------------------------------------------------
    def _monitor(self, m: Monitor, total: int):
        seen = 0
        while len(self.finished) < total:
            yield self.env.timeout(m.window_s)
            window, seen = self.finished[seen:], len(self.finished)
            if not window:
                continue
            latency = mean([t.finish - t.request.arrival_s for t in window])
            execution = mean([t.execution_s for t in window])
            want = "throughput" if latency > m.beta * execution else "latency"
            if want != self.current:
                self.current = want
                self.switches += 1
                self.marks.append((self.env.now, want))
                for d in range(self.n_dev):
                    self.env.process(self._stall(d, m.stall_s))

    def _stall(self, d: int, seconds: float):
        with self.devices[d].request(priority=-1) as gpu:  # ahead of every forward
            yield gpu
            yield self.env.timeout(seconds)

    def serve(self, requests: list[Request]) -> Outcome:
        tracked = [Tracked(r, i) for i, r in enumerate(sorted(requests,
                                                              key=lambda r: r.arrival_s))]
        waiting: deque = deque()
        ready: list[Tracked] = []
        self.finished: list[Tracked] = []
        for t in tracked:
            self.env.process(self._arrival(t, waiting))
        self.env.process(self._scheduler(tracked, waiting, ready))
        if self.monitor is not None and len(self.plans) > 1:
            self.env.process(self._monitor(self.monitor, len(tracked)))
        self.env.run()
        end = max((t.finish for t in tracked), default=0.0)
        return Outcome(tracked, end, self.busy, self.forwards, self.switches,
                       breakdown(self.intervals, self.n_dev, end))


BACKGROUND = 1 << 40  # KV deltas' priority offset: after every forward's own transfers


def breakdown(intervals: list[tuple[str, int, int, float, float]], n_dev: int,
              end: float) -> list[dict[str, float]]:
    """Per device, shares of [0, end]: computing, waiting on communication (a transfer into
    or out of it in progress while it computes nothing), idle (the rest)."""
    out = []
    for d in range(n_dev):
        gpu = [(a, b) for kind, x, _, a, b in intervals if kind == "gpu" and x == d]
        link = [(a, b) for kind, x, y, a, b in intervals if kind == "link" and d in (x, y)]
        compute = union(gpu)
        either = union(gpu + link)
        span = end or 1.0
        out.append({"compute": compute / span, "comm_wait": (either - compute) / span,
                    "idle": max(0.0, span - either) / span})
    return out


def union(spans: list[tuple[float, float]]) -> float:
    """Total length of the union of intervals."""
    total, reach = 0.0, float("-inf")
    for a, b in sorted(spans):
        if b <= reach:
            continue
        total += b - max(a, reach)
        reach = b
    return total


def kv_map(pre_data: dict[str, Any], dec_data: dict[str, Any]) -> dict[str, str]:
    """Prefill result -> the decode input it becomes (a KV cache): the decode recipe's
    ``state`` says which of its results feeds which input; the prefill returns the same
    results in the same positions. Where the placed graphs are ``period`` layers (the
    data's ``period``, ``simulate.per_period``), every layer's copy maps to its own."""
    outs, pre_outs = dec_data["outputs"], pre_data["outputs"]
    kv = {}
    for cache, out in dec_data.get("state", {}).items():
        i = outs.index(out)
        if i >= len(pre_outs) or not pre_outs[i]:
            raise RecipeError(f"the decode step's state '{cache}' comes from its result {i}, "
                              f"but the prefill phase returns {len(pre_outs)} result(s): the "
                              f"prefill must return its KV cache in the same positions")
        kv[pre_outs[i]] = cache
    period = dec_data.get("period", 1)
    if period == 1:
        return kv
    return {rename(out, i): rename(cache, i) for out, cache in kv.items() for i in range(period)}


def without_home_results(g: Graph, kept: set[str]) -> Graph:
    """``g`` whose results in ``kept`` (a prefill's KV cache) stay where they are written."""

    return replace(g, outputs=tuple(o for o in g.outputs if o not in kept))


@dataclass(frozen=True)
class System:
    """A way to serve: named plans over ``n_dev`` devices (a tuple: plans taking the
    requests in turn, ``in_turn``), ``replicas`` independent copies sharing the requests
    by their capacity (request distribution, ``dispatch``), the devices' price."""

    plans: dict[str, Plan | tuple[Plan, ...]]
    n_dev: int
    price_per_hour: float
    replicas: list[System] = field(default_factory=list)


def run(system: System, requests: list[Request], kv: dict[str, str], link: Link, batch: int,
        depth: int, monitor: Monitor | None) -> dict[str, float]:
    """The summary of ``system`` serving ``requests``; replicas each serve their share
    (``dispatch``)."""
    if system.replicas:
        parts = [Serving(r.plans, kv, link, r.n_dev, batch, depth, None).serve(share)
                 for r, share in zip(system.replicas,
                                     dispatch(system.replicas, requests, batch, link),
                                     strict=True)]
        merged = Outcome([t for p in parts for t in p.requests], max(p.end for p in parts),
                         [b for p in parts for b in p.busy],
                         {k: sum(p.forwards[k] for p in parts) for k in ("prefill", "decode")},
                         0, [b for p in parts for b in p.breakdown])
        return merged.summary()
    start = "throughput" if "throughput" in system.plans else next(iter(system.plans))
    return Serving(system.plans, kv, link, system.n_dev, batch, depth, monitor, start
                   ).serve(requests).summary()


def weighted(seconds: list[float], n: int) -> list[int]:
    """``n`` picks among instances taking ``seconds`` per request, each in proportion to its
    rate: the next goes to the one whose share would then be smallest for its rate (a load
    balancer's weighted round robin; equal ones, zero seconds included, take turns, the
    first first)."""
    counts = [0] * len(seconds)
    picks = []
    for _ in range(n):
        i = min(range(len(seconds)), key=lambda i: ((counts[i] + 1) * seconds[i], counts[i]))
        counts[i] += 1
        picks.append(i)
    return picks


def dispatch(replicas: list[System], requests: list[Request], batch: int, link: Link
             ) -> list[list[Request]]:
    """Each replica's requests, in arrival order, in proportion to its capacity
    (``weighted``; equal replicas take turns). A replica's rate is
    one over a request's work on it with full decode batches: its prefill plus
    (output tokens - 1) / ``batch`` decode steps, at the requests' mean lengths."""
    def seconds(r: System) -> float:
        plan = next(iter(r.plans.values()))
        plan = plan[0] if isinstance(plan, tuple) else plan
        pre, dec = plan.prefill, plan.decode
        stretch = mean([q.input_tokens / pre.tokens if pre.tokens and q.input_tokens else 1.0
                        for q in requests])
        steps = mean([q.output_tokens - 1 for q in requests]) / batch
        return stretch * pre.critical_path(link, r.n_dev) + steps * dec.critical_path(
            link, r.n_dev)

    ordered = sorted(requests, key=lambda q: q.arrival_s)
    picks = weighted([seconds(r) for r in replicas], len(ordered))
    return [[q for q, i in zip(ordered, picks, strict=True) if i == r]
            for r in range(len(replicas))]


def requests(s: Any, prompt: int) -> list[Request]:
    """The requests of ``serve`` params ``s``; ``prompt``: the prefill recipe's prompt."""
    from pathlib import Path

    if s.arrivals == "trace":
        return arrivals.trace(Path(s.trace))
    if s.arrivals == "offline":
        return arrivals.offline(s.requests, prompt, s.output_len)
    return arrivals.poisson(s.rate, s.requests, prompt, s.output_len, s.seed)


def max_rate(system: System, prompt: int, output_len: int, slo_s_per_token: float,
             kv: dict[str, str], link: Link, batch: int, depth: int,
             monitor: Monitor | None, n: int = 100, steps: int = 7, seed: int = 0) -> float:
    """The highest Poisson rate (requests/s) at which ``n`` requests' mean normalized latency
    stays within ``slo_s_per_token``: bisection between 0 and 1.2x the offline throughput
    (0 when even an idle system misses the SLO)."""
    full = run(system, offline(n, prompt, output_len), kv, link, batch, depth, monitor)
    lo, hi = 0.0, 1.2 * full["tokens_per_s"] / output_len
    for _ in range(steps):
        mid = (lo + hi) / 2
        got = run(system, poisson(mid, n, prompt, output_len, seed), kv, link, batch, depth,
                  monitor)
        lo, hi = (mid, hi) if got["mean_normalized_latency_s"] <= slo_s_per_token else (lo, mid)
    return lo
