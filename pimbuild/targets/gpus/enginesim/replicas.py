"""Request distribution as it runs: one engine per GPU (a replica of the whole model, with its
own queue, batch and KV blocks) behind a router that sees each engine's state when a request
arrives. The ideal it is measured against is the sum of what each GPU serves alone."""

from __future__ import annotations

import math
from collections.abc import Callable

from pimbuild.core.errors import ConfigError
from pimbuild.targets.gpus.enginesim.scheduler import Engine, Run, Seq, seqs_of
from pimbuild.targets.gpus.systems.arrivals import Request


def _load(e: Engine) -> int:
    return len(e.waiting) + len(e.running)


# router(engines that can hold the request, request, its index) -> the engine it goes to
ROUTERS: dict[str, Callable[[list[Engine], Seq, int], Engine]] = {
    "round_robin": lambda engines, s, i: engines[i % len(engines)],
    # join the shortest queue: fewest requests waiting or running
    "jsq": lambda engines, s, i: min(engines, key=_load),
    # least outstanding tokens: fewest tokens still to compute or produce
    "lot": lambda engines, s, i: min(engines, key=Engine.outstanding),
}


def distribute(requests: list[Request], engines: list[Engine], router: str) -> list[Run]:
    """Serve ``requests`` (sorted by arrival) on ``engines``, each routed on arrival."""
    if router not in ROUTERS:
        raise ConfigError(f"unknown router '{router}' (choices: {', '.join(ROUTERS)})")
    pick = ROUTERS[router]
    for i, s in enumerate(seqs_of(requests)):
        for e in engines:
            e.advance(s.req.arrival_s)
        able = [e for e in engines if e.fits(s.req)]
        if not able:
            raise ConfigError(f"request {i} ({s.req.input_tokens + s.req.output_tokens} "
                              f"positions) fits in no engine's KV cache")
        pick(able, s, i).submit(s)
    for e in engines:
        e.advance(math.inf)
    return [e.run for e in engines]


def throughput(runs: list[Run]) -> float:
    """Output tokens per second from the first arrival to the last finish."""
    return served([s for r in runs for s in r.seqs])


def served(seqs: list[Seq]) -> float:
    """Output tokens per second of ``seqs`` from the first arrival to the last finish."""
    if not seqs:
        return 0.0
    span = max(s.finish_s for s in seqs) - min(s.req.arrival_s for s in seqs)
    return sum(s.req.output_tokens for s in seqs) / span if span > 0 else math.inf
