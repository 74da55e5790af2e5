"""An engine step's time from its batch: the engine kernels (``fusion``'s view: fused
add+RMSNorm, merged QKV and gate+up GEMMs, RoPE, attention, SiLU-and-mul) of every layer at
the step's token count, the attention kernels at its prefill chunks and decode lengths, and
the LM head over the sequences that sample a token. A mixture-of-experts layer runs, in
place of gate+up, SiLU-and-mul and down over ``T`` rows, the router's GEMM over ``T`` rows,
the experts as one fused kernel over the tokens ``routing`` gives each (``fused``), and a
shared expert's MLP over ``T``; the top-k selection is not timed.

A step of ``T`` tokens (every prefill chunk plus one per decoding sequence) runs, per layer,
two add+RMSNorms, QKV, RoPE, O, gate+up, SiLU-and-mul and down over ``T`` rows; one
``prefill_attention`` per chunk (``c`` queries after ``p`` cached positions) and one
``decode_attention`` over the decoding sequences at their mean KV length (vLLM runs them as
one varlen kernel; timing them apart adds a launch at most). Then the final norm and the LM
head over the sequences in the step. Sampling and the host's scheduling are not timed
(``overhead_s`` adds a fixed cost per step where a user knows it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from pimbuild.targets.gpus.enginesim.routing import Routing
from pimbuild.targets.gpus.enginesim.shape import LlmShape
from pimbuild.targets.gpus.kerneltime import ops

KV_QUANTUM = 16  # decode lengths are timed at this granularity (a KV block's positions)
WARM = 64  # token counts whose token-parallel kernels are timed together (``prefetched``)
MLP = ("gate_up_proj", "act_fn", "down_proj")  # a dense layer's MLP kernels
T = TypeVar("T")


class Steps:
    """Step times of one model on one GPU (``seconds``: an op's time), memoised by batch."""

    def __init__(self, m: LlmShape, seconds: Callable[[ops.Op], float],
                 overhead_s: float = 0.0, routing: Routing | None = None,
                 prefetch: Callable[[list[ops.Op]], None] | None = None) -> None:
        """``prefetch``: times a list of ops at once (``Clock.prefetch``), so that a new
        batch's kernels are predicted in one call rather than one by one."""
        self.m, self.op_seconds, self.overhead_s = m, seconds, overhead_s
        self.prefetch = prefetch
        self.warm: set[int] = set()  # token counts prefetched
        self.dtype = m.dtype
        self.layer = ops.Layer(m.hidden, m.heads, m.kv_heads, m.head_dim, m.ffn)
        self.routing = routing or (Routing("balanced", m.experts, m.top_k) if m.moe else None)
        self.memo: dict[tuple, float] = {}

    def dense(self, t: int) -> float:
        """One layer's token-parallel kernels over ``t`` rows (the add+RMSNorm twice)."""
        k = self.layer.kernels(self.dtype, t)
        own = sum(self.op_seconds(o) for name, o in k.items()
                  if not (self.m.moe and name in MLP))
        return own + self.op_seconds(k["layernorm"]) + (self.sparse(t) if self.m.moe else 0.0)

    def expert(self, rows: int, ffn: int) -> float:
        """One gated MLP of width ``ffn`` over ``rows`` tokens (nothing for none)."""
        if rows == 0:
            return 0.0
        d, e = self.m.hidden, self.dtype
        return self.op_seconds(ops.Op("linear", e, 1, rows, d, 2 * ffn)) \
            + self.op_seconds(ops.Op("silu_mul", e, rows, h=ffn)) \
            + self.op_seconds(ops.Op("linear", e, 1, rows, ffn, d))

    def router(self, t: int) -> float:
        return self.op_seconds(ops.Op("linear", self.dtype, 1, t, self.m.hidden,
                                      self.m.experts))

    def fused(self, counts: tuple[int, ...]) -> float:
        """The experts as vLLM runs them, one fused kernel over every activated expert's
        tokens (``counts``), timed as the GEMMs of the same work: the ``a`` activated
        experts' gate+up weights side by side, ``d -> 2 f a``, over the mean rows an expert
        takes, then SiLU-and-mul over every row, then ``f a -> d`` (the same FLOPs and weight
        bytes as the grouped GEMMs; one launch each, not one per expert)."""
        a, rows = sum(1 for n in counts if n), sum(counts)
        if not rows:
            return 0.0
        d, f, e, mean = self.m.hidden, self.m.ffn, self.dtype, -(-rows // a)
        return self.op_seconds(ops.Op("linear", e, 1, mean, d, 2 * f * a)) \
            + self.op_seconds(ops.Op("silu_mul", e, rows, h=f)) \
            + self.op_seconds(ops.Op("linear", e, 1, mean, f * a, d))

    def sparse(self, t: int) -> float:
        """A mixture-of-experts MLP over ``t`` tokens: the router, the fused experts over
        their tokens, the shared expert over all."""
        return self.router(t) + self.fused(self.routing.counts(t)) \
            + self.expert(t if self.m.shared_ffn else 0, self.m.shared_ffn)

    def attention(self, chunks: tuple[tuple[int, int], ...], n_decode: int, kv: int) -> float:
        t = sum(self.op_seconds(self.layer.prefill(self.dtype, c, p)) for c, p in chunks)
        if n_decode:
            t += self.op_seconds(self.layer.decode(self.dtype, n_decode, kv))
        return t

    def seconds(self, chunks: list[tuple[int, int]], decode_kv: list[int]) -> float:
        """A step running prefill ``chunks`` (tokens, cached positions before them) and one
        token for each sequence of ``decode_kv`` (its KV length, the new token included)."""
        n, kv = len(decode_kv), mean_kv(decode_kv)
        key = (tuple(sorted(chunks)), n, kv)
        t = self.memo.get(key)
        if t is None:
            t = self.memo[key] = self.prefetched(sum(c for c, _ in chunks) + n, self._step, *key)
        return t

    def _step(self, chunks: tuple[tuple[int, int], ...], n: int, kv: int) -> float:
        m, e = self.m, self.dtype
        tokens = sum(c for c, _ in chunks) + n
        t = m.layers * (self.dense(tokens) + self.attention(chunks, n, kv)) + self.overhead_s
        if m.head:  # the last stage: the final norm and the LM head
            t += self.op_seconds(ops.Op("add_rmsnorm", e, tokens, h=m.hidden)) \
                + self.op_seconds(ops.Op("linear", e, 1, len(chunks) + n, m.hidden, m.vocab))
        return t

    def prefetched(self, tokens: int, f: Callable[..., T], *args: Any) -> T:
        """``f(*args)``, a step of ``tokens`` tokens: the ops it times gathered first by a dry
        run and timed at once (``prefetch``), with the token-parallel kernels of every token
        count of ``tokens``' window of ``WARM``; the same value as without."""
        if self.prefetch is None:
            return f(*args)
        found = self._recorded(f, *args)
        if tokens not in self.warm:
            lo = (tokens - 1) // WARM * WARM + 1
            self.warm.update(range(lo, lo + WARM))
            for u in range(lo, lo + WARM):
                found += self._recorded(self.dense, u)
        self.prefetch(found)
        return f(*args)

    def _recorded(self, f: Callable[..., Any], *args: Any) -> list[ops.Op]:
        """The ops ``f(*args)`` times, in order (a dry run)."""
        found: list[ops.Op] = []
        timed, self.op_seconds = self.op_seconds, lambda o: found.append(o) or 0.0
        try:
            f(*args)
        finally:
            self.op_seconds = timed
        return found


def mean_kv(decode_kv: list[int]) -> int:
    """The decoding sequences' mean KV length, rounded up to ``KV_QUANTUM`` positions (0 for
    none): the length their decode attention is timed at."""
    n = len(decode_kv)
    return -(-sum(decode_kv) // (n * KV_QUANTUM)) * KV_QUANTUM if n else 0
