"""Prefill-decode disaggregation as it runs: a prefill engine on one GPU computes each
prompt and its first token, the prompt's KV cache crosses the link (one transfer at a time,
in the order prefills finish), and a decode engine on the other GPU produces the rest. Each
side has its own memory: the prefill engine holds a prompt's blocks until its first token
(then frees them; vLLM's connector may hold them until the transfer ends), the decode engine
allocates a request's blocks when it first schedules it."""

from __future__ import annotations

import heapq
import math

from pimbuild.core.errors import ConfigError
from pimbuild.targets.gpus.costmodel.cost import Link
from pimbuild.targets.gpus.enginesim.scheduler import Engine, Seq, seqs_of
from pimbuild.targets.gpus.systems.arrivals import Request


def serve(requests: list[Request], prefill: Engine, decode: Engine, link: Link,
          kv_bytes_per_token: int) -> list[Seq]:
    """Serve ``requests`` (sorted by arrival); the requests with their times."""
    if prefill.role != "prefill" or decode.role != "decode":
        raise ConfigError("PD needs a prefill engine and a decode engine")
    seqs = seqs_of(requests)
    arrived: list[tuple[float, int, Seq]] = []  # (when its cache is on the decode GPU, ...)
    link_free = 0.0

    def hand_over(until: float) -> None:
        nonlocal link_free
        for s, done in prefill.handoffs:
            start = max(done, link_free)
            link_free = start + link.seconds(kv_bytes_per_token * s.req.input_tokens)
            heapq.heappush(arrived, (link_free, s.index, s))
        prefill.handoffs.clear()
        while arrived and arrived[0][0] <= until:
            t, _, s = heapq.heappop(arrived)
            decode.advance(t)
            decode.submit_prefilled(s)

    for s in seqs:
        if not decode.fits(s.req):
            raise ConfigError(f"request {s.index} ({s.req.input_tokens} + "
                              f"{s.req.output_tokens} positions) does not fit in the decode "
                              f"engine's KV cache ({decode.name})")
        prefill.advance(s.req.arrival_s)
        hand_over(s.req.arrival_s)
        prefill.submit(s)
    prefill.advance(math.inf)
    hand_over(math.inf)
    decode.advance(math.inf)
    return seqs
