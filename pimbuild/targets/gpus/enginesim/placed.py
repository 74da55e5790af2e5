"""Kernel-level placement in the engine (FluidGPU, docs/gpus.md): one engine, one scheduler
and one KV cache, whose steps run each decoder layer's engine kernels placed over two GPUs,
with a placement per token bucket (the paper's DDG per captured CUDA graph). AF is the same
engine with attention's kernels on one GPU and the rest on the other.

- **The layer's DDG** (``layer_graph``): the engine kernels of ``Steps`` at ``T`` tokens,
  the buffers they pass, the normed hidden state and the residual carried to the next
  layer (``kernels_of``). A mixture-of-experts layer has the router and the experts' fused
  kernel, timed over the tokens ``routing`` sends each expert: each routing pattern is its
  own DDG (its kernel times). The LM head runs on the first GPU (home), where requests enter
  and tokens leave.
- **A placement per bucket**: ``T`` is rounded up to a bucket (``BUCKETS``: vLLM's CUDA-graph
  sizes up to 512 tokens, then eager steps in powers of two). Each bucket's DDG, over every
  layer, is placed by the throughput planner (``planners.throughput``, layers counted) for
  ``depth`` micro-batches of a reference batch: ``T`` sequences decoding at ``REFERENCE_KV``
  positions, or one prefill chunk of ``T`` tokens where ``T`` exceeds ``max_seqs``. A bucket
  runs whichever of that placement and each GPU that holds every weight, alone, serves its
  reference batch sooner (a step too small to fill both GPUs runs on one, as FluidGPU's
  latency policy would place it).
- **Memory** (``full``: the GPUs that hold every weight): where every GPU can, the weights
  are replicated (as FluidGPU does) and every bucket is placed freely. Otherwise, with
  ``selective`` (the paper's "selective buffer reclamation") or with ``whole`` naming a GPU
  that keeps every weight, one placement serves every bucket: the bucket of a full batch
  (``max_seqs`` sequences), placed with each GPU's memory a constraint of the MILP
  (``PlanContext.capacity``: its weights, and room for the KV of ``REFERENCE_BATCH``
  sequences of ``REFERENCE_KV`` positions where attention runs). A layer's KV cache lives on
  every GPU where some bucket runs its attention (FluidGPU keeps replicas in step); the
  cache holds as many blocks as the tighter GPU allows.
- **A step**: its batch split into up to ``depth`` micro-batches (FluidGPU's forwards in
  flight; as many as make the step shortest), each on the placement of the step's bucket
  with its own kernel times (its chunks, its decode lengths). In flight, each micro-batch
  starts its next step when it ends this one, so a step takes the longer of a micro-batch's
  critical path and the busiest GPU's (or link direction's) load summed over the
  micro-batches: the planners' cost model (``cost``), summed layer by layer
  (``layer_cost``), with the LM head on GPU 0.

Each bucket's DDG is derived from one layer's template by substituting the token count
(``layer_graph``: about 30 us a bucket here, against 8.3 s for re-lowering the Llama-3-8B layer
through torch-mlir at another batch, the build's ``lower``). With a ``store``, each bucket's
placement is an artifact there, keyed by what the planner reads, and reused.

Approximations, stated: a bucket is planned at its reference batch, not at every batch it
serves; a step is its micro-batches' steady state (no pipeline fill or drain); the LM head is
not placed.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace

from pimbuild.core.artifacts import Store, artifact_key
from pimbuild.core.errors import ConfigError
from pimbuild.targets.gpus import planners
from pimbuild.targets.gpus.costmodel.cost import Link
from pimbuild.targets.gpus.costmodel.ddg import Graph, Kernel
from pimbuild.targets.gpus.enginesim.routing import Routing
from pimbuild.targets.gpus.enginesim.shape import LlmShape, Memory
from pimbuild.targets.gpus.enginesim.steps import Steps, mean_kv
from pimbuild.targets.gpus.kerneltime import ops

BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048, 4096,
           8192)
REFERENCE_KV = 1024  # a decode bucket is planned at this many positions a sequence
REFERENCE_BATCH = 16  # sequences whose KV a memory-bound placement keeps room for
# A layer's kernels as (name, reads, writes). A layer reads the normed hidden state ``x`` and
# the residual ``res`` and ends with the next layer's fused add+RMSNorm (the last layer's is
# the model's final norm), so one kernel writes what it carries: the planner counts the layers
# exactly (``planners._layers``, one stream). The first layer's own input norm runs with the
# embedding, at home.
ATTENTION_KERNELS = (
    ("qkv_proj", ("x",), ("qkv",)),
    ("rotary_emb", ("qkv",), ("qkvr",)),
    ("attention", ("qkvr",), ("a",)),
    ("o_proj", ("a",), ("o",)),
    ("post_attention_layernorm", ("o", "res"), ("x2", "r1")),
)
DENSE_MLP = (
    ("gate_up_proj", ("x2",), ("gu",)),
    ("act_fn", ("gu",), ("act",)),
    ("down_proj", ("act",), ("out",)),
)
EXIT = ("input_layernorm", ("out", "r1"), ("x_next", "r2"))
ATTENTION = ("qkv_proj", "rotary_emb", "attention", "o_proj")  # AF's attention side
ATTN = 2  # the attention kernel's index
NORMS = {"post_attention_layernorm": "layernorm", "input_layernorm": "layernorm"}


def kernels_of(m: LlmShape) -> tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]:
    """The layer's kernels: attention, a dense MLP or a mixture of experts (the router, the
    experts' fused kernel, a shared expert and the sum of the two), and the exit norm."""
    if not m.moe:
        return ATTENTION_KERNELS + DENSE_MLP + (EXIT,)
    router = (("router", ("x2",), ("logits",)),)
    if not m.shared_ffn:
        return ATTENTION_KERNELS + router + (("experts", ("x2", "logits"), ("out",)), EXIT)
    return ATTENTION_KERNELS + router + (("experts", ("x2", "logits"), ("ye",)),
                                         ("shared_expert", ("x2",), ("ys",)),
                                         ("combine", ("ye", "ys"), ("out",)), EXIT)


def sizes(m: LlmShape, t: int) -> dict[str, int]:
    """Bytes of every buffer of the layer at ``t`` tokens."""
    q, kv, d = m.heads * m.head_dim, m.kv_heads * m.head_dim, m.hidden
    rows = {"x": d, "res": d, "qkv": q + 2 * kv, "qkvr": q + 2 * kv, "a": q, "o": d, "x2": d,
            "r1": d, "out": d, "x_next": d, "r2": d}
    if m.moe:
        rows |= {"logits": m.experts} | ({"ye": d, "ys": d} if m.shared_ffn else {})
    else:
        rows |= {"gu": 2 * m.ffn, "act": m.ffn}
    return {b: t * w * m.dtype_bytes for b, w in rows.items()}


def layer_graph(m: LlmShape, t: int) -> Graph:
    """One decoder layer's DDG at ``t`` tokens."""
    size = sizes(m, t)
    kernels = tuple(Kernel(i, name, "other", 0, {b: size[b] for b in reads},
                           {b: size[b] for b in writes})
                    for i, (name, reads, writes) in enumerate(kernels_of(m)))
    producer = {b: k.id for k in kernels for b in k.writes}
    readers: dict[str, list[int]] = {}
    for k in kernels:
        for b in k.reads:
            readers.setdefault(b, []).append(k.id)
    return Graph(kernels, size, producer, {b: tuple(r) for b, r in readers.items()},
                 ("x", "res"), (), {"x": "x_next", "res": "r2"})


def weights(m: LlmShape) -> list[float]:
    """Bytes of weights each of the layer's kernels reads."""
    d, q, kv = m.hidden, m.heads * m.head_dim, m.kv_heads * m.head_dim
    per = {"input_layernorm": d, "qkv_proj": d * (q + 2 * kv), "o_proj": q * d,
           "post_attention_layernorm": d, "gate_up_proj": 2 * d * m.ffn,
           "down_proj": m.ffn * d, "router": d * m.experts, "experts": m.experts * 3 * d * m.ffn,
           "shared_expert": 3 * d * m.shared_ffn}
    return [float(m.dtype_bytes * per.get(name, 0)) for name, *_ in kernels_of(m)]


def bucket(t: int, buckets: tuple[int, ...]) -> int:
    """The smallest bucket of at least ``t`` tokens (the largest above them all)."""
    return next((b for b in buckets if b >= t), buckets[-1])


def check_buckets(buckets: tuple[int, ...]) -> tuple[int, ...]:
    if not buckets or any(isinstance(b, bool) or not isinstance(b, int) or b < 1
                          for b in buckets):
        raise ConfigError(f"buckets {list(buckets)}: give whole numbers of tokens >= 1")
    if any(a >= b for a, b in itertools.pairwise(buckets)):
        raise ConfigError(f"buckets {list(buckets)} are not increasing")
    return buckets


@dataclass(frozen=True)
class Setting:
    """What the placed engine is planned for."""
    link: Link
    block_size: int = 16
    max_batched_tokens: int = 2048
    max_seqs: int = 256
    depth: int = 2  # micro-batches in flight
    comm_on_device: float = 1.0
    buckets: tuple[int, ...] = BUCKETS
    time_limit_s: float = 10.0
    selective: bool = False  # one placement; weights and KV only where it runs them
    whole: tuple[int, ...] = ()  # GPUs that hold every weight beside one placement
    routing: str = "balanced"  # a mixture of experts' routing pattern (``routing``)


class Placed:
    """Step times of one model placed kernel by kernel over two GPUs (``StepTimes``)."""

    def __init__(self, m: LlmShape, clocks: list[Callable[[ops.Op], float]],
                 memories: list[Memory], s: Setting, af: int | None = None,
                 store: Store | None = None,
                 prefetch: list[Callable[[list[ops.Op]], None]] | None = None) -> None:
        """``af``: the GPU that runs attention's kernels (AF), else placed by the planner;
        ``store``: where each bucket's placement is kept, content-addressed by everything
        the planner reads (``inputs``), and reused; ``prefetch``: each GPU's batch timing
        (``Steps``)."""
        if len(clocks) != 2:
            raise ConfigError("kernel-level placement here takes two devices")
        self.store, self.reused = store, 0
        self.m, self.s, self.af = m, s, af
        self.kernels = kernels_of(m)
        self.graphs: dict[int, Graph] = {}  # a layer's DDG by its tokens
        self.routing = Routing(s.routing, m.experts, m.top_k) if m.moe else None
        self.steps = [Steps(m, c, routing=self.routing, prefetch=f)
                      for c, f in zip(clocks, prefetch or [None] * len(clocks), strict=True)]
        self.buckets = tuple(b for b in check_buckets(s.buckets)
                             if b <= max(s.max_batched_tokens, s.buckets[0]))
        self.room = [room(m, mem, s) for mem in memories]
        # Which GPUs hold every weight: FluidGPU replicates them where all GPUs can; AF
        # keeps each side's own, and so does a ``selective`` placement (the paper's
        # "selective buffer reclamation"); a GPU named ``whole`` holds them all beside one.
        fits = [r >= m.weight_bytes for r in self.room]
        for d in s.whole:
            if not fits[d]:
                raise ConfigError(f"GPU {d + 1} cannot hold every weight of {m.name} "
                                  f"({m.weight_bytes / 1e9:.1f} GB)")
        everywhere = af is None and not s.selective and not s.whole and all(fits)
        self.full = [everywhere or (af is None and d in s.whole) for d in range(2)]
        self.replicated = all(self.full)
        self.plans: dict[int, list[int]] = {}
        self.fixed: list[int] | None = None  # the one placement of every bucket
        if af is not None:
            self.fixed = [af if name in ATTENTION else 1 - af
                          for _ in range(m.layers) for name, *_ in self.kernels]
        elif not self.replicated:
            self.fixed = self._solve(bucket(s.max_seqs, self.buckets))
        self.memo: dict[tuple, float] = {}  # micro-batches -> seconds
        self.steps_memo: dict[tuple, float] = {}  # a step's batch -> seconds
        self.patterns: dict[int, Counter] = {}

    # -- planning -------------------------------------------------------------------------
    def times(self, t: int, chunks: tuple[tuple[int, int], ...], n: int, kv: int
              ) -> list[list[float]]:
        """Seconds of each of the layer's kernels on each GPU at ``t`` tokens, attention
        over ``chunks`` and ``n`` decodes at ``kv`` positions."""
        counts = self.routing.counts(t) if self.routing else ()
        cols = [st.prefetched(t, self._column, st, t, chunks, n, kv, counts)
                for st in self.steps]
        return [list(row) for row in zip(*cols, strict=True)]

    def _column(self, st: Steps, t: int, chunks: tuple[tuple[int, int], ...], n: int, kv: int,
                counts: tuple[int, ...]) -> list[float]:
        """The layer's kernel times on ``st``'s GPU (``times``)."""
        col, ks = [], st.layer.kernels(st.dtype, t)
        for name, *_ in self.kernels:
            if name == "attention":
                col.append(st.attention(chunks, n, kv))
            elif name == "experts":
                col.append(st.fused(counts))
            elif name == "shared_expert":
                col.append(st.expert(t, self.m.shared_ffn))
            elif name == "router":
                col.append(st.router(t))
            elif name == "combine":  # the experts' and the shared expert's sum
                col.append(st.op_seconds(ops.Op("add", st.dtype, t, h=self.m.hidden)))
            else:
                col.append(st.op_seconds(ks[NORMS.get(name, name)]))
        return col

    def graph(self, t: int) -> Graph:
        g = self.graphs.get(t)
        if g is None:
            g = self.graphs[t] = layer_graph(self.m, t)
        return g

    def reference(self, t: int) -> list[list[float]]:
        """Kernel times of bucket ``t``'s reference batch (``t`` tokens)."""
        if t <= self.s.max_seqs:
            return self.times(t, (), t, REFERENCE_KV)
        return self.times(t, ((t, 0),), 0, 0)

    def context(self, t: int) -> planners.PlanContext:
        """Bucket ``t``'s DDG over every layer: one of its ``depth`` micro-batches, the
        forwards the planner pipelines."""
        mb = -(-t // self.s.depth)
        one = planners.PlanContext(self.graph(mb), self.reference(mb), self.s.link, 2,
                                   self.s.comm_on_device, self.s.time_limit_s,
                                   incumbent=True)
        return planners.unrolled(one, self.m.layers)

    def _plan(self, t: int) -> list[int]:
        """Bucket ``t``'s placement, over every layer: the planner's (or the one placement
        every bucket runs), or a GPU that holds every weight alone, whichever serves the
        bucket's reference batch sooner (a step too small to fill both GPUs runs on one)."""
        if self.af is not None:
            return self.fixed
        planned = self.fixed if self.fixed is not None else self._solve(t)
        alone = [[d] * len(planned) for d in range(2) if self.full[d]]
        if not alone:
            return planned
        return min([planned, *alone], key=lambda p: self.reference_seconds(t, p))

    def _solve(self, t: int) -> list[int]:
        """The throughput planner's placement of bucket ``t``; where the weights are not
        everywhere, within each GPU's memory (its weights and the reference batch's KV; a
        GPU that holds every weight has room for any share of them)."""
        ctx = self.context(t)
        if not self.replicated:
            kv = 2 * self.m.kv_heads * self.m.head_dim * self.m.dtype_bytes \
                * REFERENCE_BATCH * REFERENCE_KV
            w = weights(self.m)
            home = self.m.weight_bytes - self.m.layers * sum(w)
            capacity = [self.room[0] - home, self.room[1]]
            for d in range(2):
                if self.full[d]:  # every weight there already, and every layer's KV beside
                    if self.room[d] - self.m.weight_bytes < self.m.layers * kv:
                        raise ConfigError(f"GPU {d + 1} holds every weight of {self.m.name} "
                                          f"with no room for {REFERENCE_BATCH} sequences' KV")
                    capacity[d] = math.inf
            ctx = replace(ctx, resident=tuple(x + (kv if i == ATTN else 0.0)
                                              for i, x in enumerate(w)) * self.m.layers,
                          capacity=tuple(capacity))
        if self.store is None:
            return self._place(ctx)
        art = self.store.artifact("serve_plan", artifact_key("serve_plan", inputs(ctx), {}))
        status = self.store.build(art, lambda out: (out / "placement.json").write_text(
            json.dumps(self._place(ctx)) + "\n"))
        self.reused += status == "reused"
        return json.loads((art.dir / "placement.json").read_text())

    def _place(self, ctx: planners.PlanContext) -> list[int]:
        try:
            return planners.place("throughput", ctx).place
        except RuntimeError as e:
            raise ConfigError(f"{self.m.name} cannot be placed over the two GPUs within their "
                              f"memory ({e})") from None

    def reference_seconds(self, t: int, p: list[int]) -> float:
        """Bucket ``t``'s reference batch on placement ``p``, in the micro-batches that
        make it shortest."""
        chunks, decodes = ([], [REFERENCE_KV] * t) if t <= self.s.max_seqs else ([(t, 0)], [])
        return min(self._seconds(micro_batches(chunks, decodes, depth), p)
                   for depth in range(1, self.s.depth + 1))

    def plan(self, t: int) -> list[int]:
        b = bucket(t, self.buckets)
        if b not in self.plans:
            self.plans[b] = self._plan(b)
        return self.plans[b]

    def plan_all(self) -> None:
        for b in self.buckets:
            self.plan(b)

    # -- memory -----------------------------------------------------------------------------
    def kv_blocks(self) -> int:
        """Blocks the KV cache holds: every layer's cache where any bucket runs its
        attention, on the GPU with the least room for its share (plans every bucket)."""
        self.plan_all()
        n_k, per_layer = len(self.kernels), 2 * self.m.kv_heads * self.m.head_dim \
            * self.m.dtype_bytes * self.s.block_size
        layers = [set(), set()]
        for p in self.plans.values():
            for j in range(self.m.layers):
                layers[p[j * n_k + ATTN]].add(j)
        blocks = []
        for d in range(2):
            if layers[d]:
                held = self.m.weight_bytes if self.full[d] else self.held(d)
                blocks.append(int((self.room[d] - held) // (len(layers[d]) * per_layer)))
        if min(blocks) < 1:
            raise ConfigError(f"{self.m.name}: placed over the two GPUs, no room is left for "
                              f"a KV block")
        return min(blocks)

    def held(self, d: int) -> float:
        """Weight bytes on GPU ``d`` under the one placement every bucket runs."""
        p, w, n_k = self.fixed, weights(self.m), len(self.kernels)
        home = self.m.weight_bytes - self.m.layers * sum(w)
        return (home if d == 0 else 0.0) + sum(w[i % n_k] for i, dev in enumerate(p) if dev == d)

    def attention_share(self, t: int) -> float:
        """The share of the layers whose attention bucket ``t`` runs on the second GPU."""
        p, n_k = self.plan(t), len(self.kernels)
        return sum(p[j * n_k + ATTN] for j in range(self.m.layers)) / self.m.layers

    def compute_share(self, t: int) -> float:
        """The share of bucket ``t``'s reference compute on the second GPU."""
        b = bucket(t, self.buckets)
        p, times = self.plan(b), self.reference(-(-b // self.s.depth)) * self.m.layers
        on = [times[k][d] for k, d in enumerate(p)]
        return sum(x for x, d in zip(on, p, strict=True) if d == 1) / sum(on)

    def placements(self) -> list[dict]:
        """Each bucket's placement, said: the GPU it runs on alone (None: both), and the
        shares of its layers' attention and of its reference compute on the second GPU."""
        out = []
        for b in self.buckets:
            p = self.plan(b)
            out.append({"tokens": b, "alone_on": p[0] if len(set(p)) == 1 else None,
                        "attention_on_second": self.attention_share(b),
                        "compute_on_second": self.compute_share(b)})
        return out

    # -- steps ------------------------------------------------------------------------------
    def seconds(self, chunks: list[tuple[int, int]], decode_kv: list[int]) -> float:
        """The step in as many micro-batches, up to ``depth``, as make it the shortest (one
        where the weights' reads dominate, several where they fill both GPUs)."""
        key = (tuple(sorted(chunks)), len(decode_kv), mean_kv(decode_kv))
        t = self.steps_memo.get(key)
        if t is None:
            t = self.steps_memo[key] = min(self.split(chunks, decode_kv, d)
                                           for d in range(1, self.s.depth + 1))
        return t

    def split(self, chunks: list[tuple[int, int]], decode_kv: list[int], depth: int) -> float:
        key = micro_batches(chunks, decode_kv, depth)
        t = self.memo.get(key)
        if t is None:
            t = self.memo[key] = self._seconds(key)
        return t

    def _seconds(self, key: tuple, chosen: list[int] | None = None) -> float:
        """The steady state of the micro-batches in flight, each starting its next step when
        it ends its last: the longest of one micro-batch's critical path and the busiest
        GPU's or link direction's load over all of them (``cost``; the LM head on GPU 0).
        Each runs the placement of the step's bucket (its tokens in all), or ``chosen``."""
        paths, load = [], [0.0] * 6
        step = sum(c for chunks, n, _ in key for c, _ in chunks) + sum(n for _, n, _ in key)
        p = chosen or self.plan(step)
        layers = patterns(p, self.m.layers, len(self.kernels)) if chosen \
            else self.layers_of(step)
        for chunks, n, kv in key:
            tokens = sum(c for c, _ in chunks) + n
            g, t = self.graph(tokens), self.times(tokens, chunks, n, kv)
            path = 0.0
            for (pattern, entry), count in layers.items():
                cp, vector = layer_cost(g, pattern, entry, t, self.s.link, self.s.comm_on_device)
                path += count * cp
                load = [a + count * b for a, b in zip(load, vector, strict=True)]
            st = self.steps[0]
            head = st.op_seconds(ops.Op("linear", st.dtype, 1, len(chunks) + n,
                                        self.m.hidden, self.m.vocab))
            if p[-1]:  # the final norm's output goes home to the head
                path += self.s.link.seconds(tokens * self.m.hidden * self.m.dtype_bytes)
            paths.append(path + head)
            load[0] += head
        return max(max(paths), max(load))

    def layers_of(self, tokens: int) -> Counter:
        """How many layers of bucket ``tokens``' placement run each (placement of the layer's
        kernels, GPU its carried inputs come from) (the first layer's: the last's exit)."""
        b = bucket(tokens, self.buckets)
        out = self.patterns.get(b)
        if out is None:
            out = self.patterns[b] = patterns(self.plan(b), self.m.layers, len(self.kernels))
        return out


def patterns(p: list[int], layers: int, n: int) -> Counter:
    """(each layer's ``n`` kernels' GPUs, the GPU its carried inputs come from: the exit of
    the layer before, the last's for the first) -> how many layers."""
    return Counter((tuple(p[j * n:(j + 1) * n]), p[j * n - 1]) for j in range(layers))


def layer_cost(g: Graph, pattern: tuple[int, ...], entry: int, times: list[list[float]],
               link: Link, kappa: float) -> tuple[float, list[float]]:
    """One layer's critical path and load vector (``cost.load_vector``: busy, sent, received
    per GPU) with its carried inputs on GPU ``entry``. Every kernel of the layer leads to its
    exit kernel, so the next layer starts after it: a stack's ``cost.critical_path`` and
    ``cost.loads`` over ``ddg.unroll`` are these summed layer by layer."""
    finish, free = [0.0] * len(g.kernels), [0.0, 0.0]
    sent, received, busy = [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]
    for b, size in g.buffer_bytes.items():
        src = entry if b in g.carry else pattern[g.producer[b]]
        for d in {pattern[r] for r in g.readers.get(b, ())} - {src}:
            sent[src] += link.seconds(size)
            received[d] += link.seconds(size)
    for k, kern in enumerate(g.kernels):
        d = pattern[k]
        start = free[d]
        for b in kern.reads:
            src = g.producer.get(b)
            ready = 0.0 if src is None else finish[src]
            if (entry if src is None else pattern[src]) != d:
                ready += link.seconds(g.buffer_bytes[b])
            start = max(start, ready)
        finish[k] = free[d] = start + times[k][d]
        busy[d] += times[k][d]
    busy = [busy[d] + kappa * (sent[d] + received[d]) for d in range(2)]
    return max(finish), busy + sent + received


def inputs(ctx: planners.PlanContext) -> dict:
    """Everything the throughput planner reads of a bucket's context: one layer's DDG (its
    kernels, buffers and carried pairs), its kernel times, the layer count, the link, the
    memory rows and the solver's limits."""
    g, n = ctx.layer or ctx.graph, len((ctx.layer or ctx.graph).kernels)
    return {"kernels": [[k.name, sorted(k.reads.items()), sorted(k.writes.items())]
                        for k in g.kernels],
            "buffers": sorted(g.buffer_bytes.items()), "inputs": list(g.inputs),
            "outputs": list(g.outputs), "carry": sorted(g.carry.items()),
            "state": sorted(g.state), "times": ctx.times[:n], "period": ctx.period,
            "link": [ctx.link.gbps, ctx.link.latency_us], "kappa": ctx.comm_on_device,
            "resident": None if ctx.resident is None else list(ctx.resident[:n]),
            "capacity": None if ctx.capacity is None else [str(c) for c in ctx.capacity],
            "limit_s": ctx.time_limit_s, "gap": ctx.mip_gap}


def room(m: LlmShape, mem: Memory, s: Setting) -> float:
    """Bytes a GPU has for weights and KV cache: its memory times the utilisation, less the
    activations of the largest step and the runtime reserve."""
    return mem.memory_bytes * mem.utilisation - mem.reserve_bytes \
        - mem.activation_bytes(m, s.max_batched_tokens, s.max_seqs)


def micro_batches(chunks: list[tuple[int, int]], decode_kv: list[int], depth: int
                  ) -> tuple[tuple[tuple[tuple[int, int], ...], int, int], ...]:
    """The step's work in at most ``depth`` non-empty micro-batches of near-equal tokens, as
    (prefill chunks, decodes, their KV length): the decodes shared out evenly, at the step's
    mean KV length (rounded up to ``KV_QUANTUM`` positions), each prefill chunk to the
    micro-batch with the fewest tokens."""
    n, kv = len(decode_kv), mean_kv(decode_kv)
    counts = [n // depth + (i < n % depth) for i in range(depth)]
    tokens, parts = list(counts), [[] for _ in range(depth)]
    for c in sorted(chunks, reverse=True):
        i = tokens.index(min(tokens))
        parts[i].append(c)
        tokens[i] += c[0]
    return tuple((tuple(sorted(p)), k, kv if k else 0)
                 for p, k in zip(parts, counts, strict=True) if p or k)
