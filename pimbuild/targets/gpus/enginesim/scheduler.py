"""vLLM's scheduler (v1, chunked prefill, FCFS) over paged KV blocks, one step at a time.

Each step has a budget of ``max_batched_tokens``. Running requests go first, in the order
they were admitted: a decoding one takes one token, one still prefilling the next chunk of
its prompt (as much as the budget leaves). Each needs KV blocks for the positions it reaches;
where none are free, the latest-admitted running request is preempted (its blocks freed, it
goes back to the head of the queue and recomputes its prompt and the tokens it produced
when it runs again, vLLM's recompute mode). Then, if nothing was preempted, waiting requests
that have arrived are admitted in arrival order while the budget, ``max_seqs`` and the free
blocks allow (a prompt longer than the budget is chunked over several steps). The step takes
``Steps.seconds`` of its batch; a request whose computed positions reach its length samples a
token at the step's end. An idle engine jumps to the next arrival.

Not modelled: prefix caching (vLLM's run may hit cached prefixes; counted as computed here),
the sampler's time, and speculative decoding."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from pimbuild.core.errors import ConfigError
from pimbuild.targets.gpus.systems.arrivals import Request

ROLES = ("both", "prefill", "decode")


class StepTimes(Protocol):
    """What an engine asks of its GPU(s): a step's seconds from its batch (``Steps``, or
    ``pipeline.Pipeline`` over two GPUs)."""

    def seconds(self, chunks: list[tuple[int, int]], decode_kv: list[int]) -> float: ...


@dataclass(frozen=True)
class Limits:
    """The engine's settings (vLLM's names)."""
    max_seqs: int = 256  # max_num_seqs
    max_batched_tokens: int = 2048  # max_num_batched_tokens
    block_size: int = 16
    kv_blocks: int = 0  # blocks of block_size positions for the KV cache


@dataclass(slots=True)
class Seq:
    """A request in the engine. ``length``: the positions to compute before its next token,
    the prompt and every token produced (the last one's keys and values are computed by the
    step that samples the next)."""
    req: Request
    index: int
    length: int = 0
    computed: int = 0  # positions whose keys and values are in the cache
    generated: int = 0  # tokens produced
    blocks: int = 0
    first_s: float = -1.0
    finish_s: float = -1.0
    preempted: int = 0


@dataclass
class Run:
    """What a simulation measured: per request its times, per step its batch."""
    seqs: list[Seq]
    steps: int = 0
    busy_s: float = 0.0
    preemptions: int = 0
    peak_blocks: int = 0
    batch: list[int] = field(default_factory=list)


class Engine:
    """One engine instance on one GPU: its queue, running batch, KV blocks and clock."""

    def __init__(self, steps: StepTimes, limits: Limits, name: str = "",
                 role: str = "both") -> None:
        if role not in ROLES:
            raise ConfigError(f"unknown engine role '{role}' (choices: {', '.join(ROLES)})")
        if limits.kv_blocks < 1:
            raise ConfigError(f"the engine{' on ' + name if name else ''} needs at least one "
                              f"KV block")
        self.steps, self.limits, self.name = steps, limits, name
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.free, self.now = limits.kv_blocks, 0.0
        self.run = Run([])
        # "prefill": a request leaves at its first token, its KV cache handed on
        # (``handoffs``: (request, when)); "decode": requests arrive with their prompt's
        # cache (``submit_prefilled``); "both": a whole engine
        self.role = role
        self.handoffs: list[tuple[Seq, float]] = []

    @property
    def busy(self) -> bool:
        return bool(self.waiting or self.running)

    def outstanding(self) -> int:
        """Tokens still to compute or produce for the requests it holds."""
        return sum(s.length - s.computed + s.req.output_tokens - s.generated
                   for q in (self.waiting, self.running) for s in q)

    def fits(self, r: Request) -> bool:
        """Whether its cache can hold ``r`` at its longest (a prefill engine: its prompt)."""
        positions = r.input_tokens + (1 if self.role == "prefill" else r.output_tokens)
        return -(-positions // self.limits.block_size) <= self.limits.kv_blocks

    def submit(self, s: Seq) -> None:
        """Queue ``s``, which arrives now."""
        if not self.fits(s.req):
            raise ConfigError(
                f"a request of {s.req.input_tokens} + {s.req.output_tokens} positions needs "
                f"more than the {self.limits.kv_blocks} KV blocks of "
                f"{self.limits.block_size}{' on ' + self.name if self.name else ''}")
        self.waiting.append(s)
        self.run.seqs.append(s)

    def submit_prefilled(self, s: Seq) -> None:
        """Queue ``s`` with its prompt's keys and values arrived and its first token out: its
        blocks are allocated when it is first scheduled."""
        s.computed, s.blocks = s.req.input_tokens, 0
        self.submit(s)

    def advance(self, until: float) -> None:
        """Run steps while one starts before ``until``; idle, wait until then."""
        while self.busy and self.now < until:
            self.step()
        if not self.busy:
            self.now = max(self.now, until)

    def step(self) -> None:
        lim, run = self.limits, self.run
        batch, self.free = _schedule(self.waiting, self.running, lim, self.free, run)
        if not batch:  # every waiting request needs more blocks than are free
            raise ConfigError("the engine cannot schedule: no running request and too few "
                              "free KV blocks for the next waiting one")
        decodes = [s.computed + 1 for s, n in batch if n == 1 and s.generated]
        chunks = [(n, s.computed) for s, n in batch if n != 1 or not s.generated] \
            if len(decodes) < len(batch) else []
        dt = self.steps.seconds(chunks, decodes)
        self.now += dt
        run.steps, run.busy_s = run.steps + 1, run.busy_s + dt
        run.batch.append(len(batch))
        run.peak_blocks = max(run.peak_blocks, lim.kv_blocks - self.free)
        now, prefill = self.now, self.role == "prefill"
        for s, n in batch:
            s.computed += n
            if s.computed >= s.length:
                s.generated += 1
                s.length += 1
                if s.first_s < 0:
                    s.first_s = now
                if s.generated >= s.req.output_tokens:
                    s.finish_s = now
                    self._leave(s)
                elif prefill:
                    self._leave(s)
                    self.handoffs.append((s, now))

    def _leave(self, s: Seq) -> None:
        self.running.remove(s)
        self.free += s.blocks
        s.blocks = 0


def seqs_of(requests: list[Request]) -> list[Seq]:
    if any(r.input_tokens < 1 for r in requests):
        raise ConfigError("every request needs a prompt of at least one token")
    return [Seq(r, i, r.input_tokens) for i, r in enumerate(requests)]


def simulate(requests: list[Request], steps: StepTimes, limits: Limits) -> Run:
    """Serve ``requests`` (sorted by arrival) to completion on one engine."""
    return serve(requests, Engine(steps, limits))


def serve(requests: list[Request], engine: Engine) -> Run:
    """Serve ``requests`` (sorted by arrival) to completion on ``engine``."""
    for s in seqs_of(requests):
        engine.advance(s.req.arrival_s)
        engine.submit(s)
    engine.advance(math.inf)
    return engine.run


def _schedule(waiting: deque, running: list[Seq], limits: Limits, free: int,
              run: Run) -> tuple[list[tuple[Seq, int]], int]:
    """The step's (sequence, tokens) and the free blocks left (see the module)."""
    budget, batch, preempted, i = limits.max_batched_tokens, [], False, 0
    size = limits.block_size
    while i < len(running) and budget > 0:
        s = running[i]
        n = s.length - s.computed
        if n > budget:
            n = budget
        need = -(-(s.computed + n) // size) - s.blocks
        while need > free and running[-1] is not s:
            victim = running.pop()
            free += _preempt(victim, waiting, run)
            preempted = True
        if need > free:  # the last one running and still short: it waits itself
            running.pop()
            free += _preempt(s, waiting, run)
            preempted = True
            break
        free -= need
        s.blocks += need
        budget -= n
        batch.append((s, n))
        i += 1
    while waiting and budget > 0 and not preempted and len(running) < limits.max_seqs:
        s = waiting[0]
        n = s.length - s.computed
        if n > budget:
            n = budget
        need = -(-(s.computed + n) // size) - s.blocks
        if need > free:
            break
        waiting.popleft()
        free -= need
        s.blocks += need
        budget -= n
        running.append(s)
        batch.append((s, n))
    return batch, free


def _preempt(s: Seq, waiting: deque, run: Run) -> int:
    """Free ``s``'s blocks and queue it first to recompute; the blocks freed."""
    freed, s.blocks, s.computed = s.blocks, 0, 0
    s.preempted += 1
    run.preemptions += 1
    waiting.appendleft(s)
    return freed
