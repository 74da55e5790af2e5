"""A model split by layers over two GPUs (pipeline parallelism with one batch in flight: a
step runs the first GPU's layers, sends the hidden state of its tokens over the link, then
runs the second's). One scheduler serves it, as one vLLM engine does; its KV cache holds as
many blocks as the stage with the least room, each stage holding its own layers' share. This
is how a model larger than one GPU is served across two when neither can hold it alone."""

from __future__ import annotations

from collections.abc import Callable

from pimbuild.core.errors import ConfigError
from pimbuild.targets.gpus.costmodel.cost import Link
from pimbuild.targets.gpus.enginesim.routing import Routing
from pimbuild.targets.gpus.enginesim.shape import LlmShape, Memory
from pimbuild.targets.gpus.enginesim.steps import Steps
from pimbuild.targets.gpus.kerneltime import ops

# the batch a split is chosen for: decoding sequences of this many positions, as many as the
# KV cache holds (up to max_seqs)
REFERENCE_KV = 1024


class Pipeline:
    """Step times of a two-stage split: the stages' times plus the hidden state's transfer."""

    def __init__(self, stages: list[Steps], link: Link) -> None:
        self.stages, self.link = stages, link
        m = stages[0].m
        self.token_bytes = m.hidden * m.dtype_bytes

    def seconds(self, chunks: list[tuple[int, int]], decode_kv: list[int]) -> float:
        tokens = sum(c for c, _ in chunks) + len(decode_kv)
        return sum(s.seconds(chunks, decode_kv) for s in self.stages) \
            + (len(self.stages) - 1) * self.link.seconds(tokens * self.token_bytes)


def split(m: LlmShape, clocks: list[Callable[[ops.Op], float]], memories: list[Memory],
          link: Link, block_size: int, max_batched_tokens: int, max_seqs: int,
          routing: Routing | None = None) -> tuple[int, Pipeline, int]:
    """(layers on the first GPU, its step times, KV blocks): the split that serves the most
    decode tokens per second at ``REFERENCE_KV`` positions a sequence with the batch its KV
    cache allows; a ConfigError where no split fits."""
    best = None
    for first in range(1, m.layers):
        stages = m.stages(first)
        try:
            blocks = min(mem.kv_blocks(st, block_size, max_batched_tokens, max_seqs)
                         for st, mem in zip(stages, memories, strict=True))
        except ConfigError:
            continue
        pipe = Pipeline([Steps(st, c, routing=routing)
                         for st, c in zip(stages, clocks, strict=True)], link)
        batch = min(max_seqs, blocks * block_size // REFERENCE_KV)
        if batch < 1:
            continue
        rate = batch / pipe.seconds([], [REFERENCE_KV] * batch)
        if best is None or rate > best[0]:
            best = (rate, first, pipe, blocks)
    if best is None:
        raise ConfigError(f"{m.name} fits on the two GPUs split at no layer (weights "
                          f"{m.weight_bytes / 1e9:.1f} GB)")
    return best[1], best[2], best[3]
