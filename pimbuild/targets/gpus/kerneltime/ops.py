"""Operators as the kernel-time model sees them: the ops CSV format, each op's work, and the
specs of the GPUs that measured data comes from (docs/gpus.md).

An ops CSV has one row per operator and the columns ``op, dtype, b, m, n, k, h`` (and ``g``
for attention):

- ``linear``: an input ``(b, m, n)`` times a weight ``n -> k`` (a GEMM of ``b*m`` rows,
  reduction ``n``, ``k`` columns); ``bmm``: ``(b, m, n) @ (b, n, k)``;
- fused attention as a serving engine launches it (FlashAttention, FlashInfer): ``b``
  sequences of ``m`` query tokens over ``n`` key/value positions, ``h`` query heads, ``g``
  key/value heads (GQA), head dimension ``k``: ``prefill_attention`` is causal over the last
  ``m`` of the ``n`` positions (a prompt, or a prefill chunk after ``n - m`` cached ones),
  ``decode_attention`` one new token per sequence (``m`` = 1) over its KV cache;
- the vector ops over ``b`` rows of ``h`` elements: binary ``add mul div pow silu_mul``,
  unary ``addu mulu divu powu relu gelu silu tanh rope`` (``addu``: a tensor and a scalar),
  row reductions ``softmax layernorm rmsnorm`` and ``sum`` (one value per row);
- ``dtype``: ``fp32``, ``fp16`` or ``bf16``; a measured file adds ``time_us``.

``work`` gives an op's FLOPs, the bytes it must move at least once, and its family
(``gemm``, ``attention``, ``elementwise``, ``reduction``); the model's terms are built on
these.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pimbuild.core.errors import ConfigError
from pimbuild.core.schema import Strict, check, check_columns, number

GEMMS = ("linear", "bmm")
ATTENTION = ("prefill_attention", "decode_attention")
BINARY = ("add", "mul", "div", "pow", "silu_mul")
UNARY = ("addu", "mulu", "divu", "powu", "relu", "gelu", "silu", "tanh", "rope")
# sum: one value per row; add_rmsnorm: a residual add and the RMSNorm of its result (vLLM's
# fused_add_rms_norm: reads two rows, writes the sum and the norm)
ROWS = ("softmax", "layernorm", "rmsnorm", "add_rmsnorm", "sum")
OPS = GEMMS + ATTENTION + BINARY + UNARY + ROWS
DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}
MAX_DIM = 2**31  # the largest dimension an ops CSV may give
COLUMNS = ("op", "dtype", "b", "m", "n", "k", "h", "g")
# the dimensions each kind of op reads (the others stay 1)
DIMS = {**dict.fromkeys(GEMMS, ("b", "m", "n", "k")),
        **dict.fromkeys(ATTENTION, ("b", "m", "n", "k", "h", "g"))}
VECTOR_DIMS = ("b", "h")
# FLOPs per element of a vector op beyond one (a transcendental counts as a few)
EXTRA_FLOPS = {"pow": 8, "powu": 8, "gelu": 8, "tanh": 6, "silu": 5, "silu_mul": 6,
               "rope": 3, "softmax": 5, "layernorm": 7, "rmsnorm": 4, "add_rmsnorm": 5}


@dataclass(frozen=True)
class Op:
    op: str
    dtype: str
    b: int
    m: int = 1
    n: int = 1
    k: int = 1
    h: int = 1
    g: int = 1  # key/value heads of an attention op

    @property
    def family(self) -> str:
        return "gemm" if self.op in GEMMS else "attention" if self.op in ATTENTION \
            else "reduction" if self.op in ROWS else "elementwise"

    @property
    def dims(self) -> tuple[str, ...]:
        return DIMS.get(self.op, VECTOR_DIMS)

    @property
    def tensor(self) -> bool:
        """Whether it can run on tensor cores (a GEMM or attention in fp16 / bf16)."""
        return self.op in GEMMS + ATTENTION and self.dtype != "fp32"

    def work(self) -> tuple[float, float]:
        """(FLOPs, bytes it must move at least once)."""
        e = DTYPE_BYTES[self.dtype]
        if self.op == "linear":
            rows = self.b * self.m
            return 2.0 * rows * self.n * self.k, e * (rows * self.n + self.n * self.k
                                                      + rows * self.k)
        if self.op == "bmm":
            return 2.0 * self.b * self.m * self.n * self.k, \
                e * self.b * (self.m * self.n + self.n * self.k + self.m * self.k)
        if self.op in ATTENTION:
            # QK^T and PV over the positions each query sees (causal: the last m of n)
            seen = self.m * self.n - self.m * (self.m - 1) / 2
            return 4.0 * self.b * self.h * self.k * seen, \
                e * self.b * self.k * (2 * self.m * self.h + 2 * self.n * self.g)
        size = float(self.b * self.h)
        flops = size * (1 + EXTRA_FLOPS.get(self.op, 0))
        if self.op == "sum":
            return flops, e * (size + self.b)
        tensors = 4 if self.op == "add_rmsnorm" else 3 if self.op in BINARY else 2
        return flops, e * tensors * size

    def key(self) -> str:
        return f"{self.op}:{self.dtype}:" + "x".join(str(getattr(self, d)) for d in self.dims)


@dataclass(frozen=True)
class Layer:
    """A LLaMA-style decoder layer (gated MLP, grouped-query attention) and the engine
    kernels vLLM launches for it: the shapes the per-layer check, LLMServingSim's profiles
    and the engine simulation's steps all time."""
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int

    def kernels(self, dtype: str, t: int) -> dict[str, Op]:
        """The token-parallel kernels over ``t`` tokens, by vLLM's layer names
        (``layernorm``: the fused residual add + RMSNorm, run twice a layer)."""
        d, hd, q = self.hidden, self.head_dim, self.heads * self.head_dim
        return {"layernorm": Op("add_rmsnorm", dtype, t, h=d),
                "qkv_proj": Op("linear", dtype, 1, t, d, q + 2 * self.kv_heads * hd),
                "rotary_emb": Op("rope", dtype, t, h=q + self.kv_heads * hd),
                "o_proj": Op("linear", dtype, 1, t, q, d),
                "gate_up_proj": Op("linear", dtype, 1, t, d, 2 * self.ffn),
                "act_fn": Op("silu_mul", dtype, t, h=self.ffn),
                "down_proj": Op("linear", dtype, 1, t, self.ffn, d)}

    def prefill(self, dtype: str, chunk: int, past: int = 0) -> Op:
        """Attention over a prompt chunk of ``chunk`` tokens after ``past`` cached ones."""
        return Op("prefill_attention", dtype, 1, chunk, chunk + past, self.head_dim,
                  self.heads, self.kv_heads)

    def decode(self, dtype: str, b: int, kv: int) -> Op:
        """Attention of ``b`` sequences' new tokens over ``kv`` positions each."""
        return Op("decode_attention", dtype, b, 1, kv, self.head_dim, self.heads,
                  self.kv_heads)


Dim = number((">=", 1, MAX_DIM), integer=True)
Microseconds = number((">", 0))


class Row(Strict):
    """One row of an ops CSV: an op, its element type and the dimensions it reads (the
    others may be left empty), and its measured times where the file has them."""

    op: Literal[OPS]  # type: ignore[valid-type]
    dtype: Literal[tuple(DTYPE_BYTES)]  # type: ignore[valid-type]
    b: Dim | None = None
    m: Dim | None = None
    n: Dim | None = None
    k: Dim | None = None
    h: Dim | None = None
    g: Dim | None = None
    time_us: Microseconds | None = None
    median_us: Microseconds | None = None  # bench/measure_ops.py's


def parse(row: dict[str, Any], where: str) -> Op:
    """One ops-CSV row as an Op; a ConfigError naming ``where`` (file and line) otherwise."""
    given = {k: v.strip() if isinstance(v, str) else v for k, v in row.items()
             if k in Row.model_fields}
    r = check(Row, {k: v for k, v in given.items() if v not in ("", None)}, where,
              text=True)
    missing = [d for d in DIMS.get(r.op, VECTOR_DIMS) if getattr(r, d) is None]
    if missing:
        raise ConfigError(f"{where}: {r.op} needs a whole number '{missing[0]}'")
    op, dtype = r.op, r.dtype
    dims = {d: getattr(r, d) for d in DIMS.get(op, VECTOR_DIMS)}
    o = Op(op=op, dtype=dtype, **dims)
    if op in ATTENTION and (o.h % o.g or (op == "prefill_attention" and o.m > o.n)
                            or (op == "decode_attention" and o.m != 1)):
        raise ConfigError(f"{where}: {op} needs h a multiple of g and "
                          + ("m <= n (the queries are the last m of n positions)"
                             if op == "prefill_attention" else "m = 1 (one token per "
                             "sequence)") + f" (got h={o.h}, g={o.g}, m={o.m}, n={o.n})")
    return o


def read(path: Path) -> tuple[list[Op], list[dict[str, str]]]:
    """The ops of an ops CSV and its rows as read (the measured ``time_us`` kept there)."""
    try:
        with Path(path).open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise ConfigError(f"cannot read ops file {path}: {e.strerror}") from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise ConfigError(f"{path} is not a CSV file: {e}") from None
    if not rows:
        raise ConfigError(f"{path} has no ops (a header line and one row per op: "
                          f"{', '.join(COLUMNS)})")
    if not {"op", "dtype"} <= set(rows[0]):
        raise ConfigError(f"{path}: needs the columns {', '.join(COLUMNS)} "
                          f"(has {', '.join(str(c) for c in rows[0])})")
    check_columns(rows[0], Row, str(path))
    return [parse(r, f"{path}:{i + 2}") for i, r in enumerate(rows)], rows


@dataclass(frozen=True)
class Gpu:
    """What the model reads of a GPU: spec-sheet numbers only."""
    name: str
    sms: int
    boost_mhz: float
    fp32_tflops: float
    tensor_tflops: float  # dense fp16/bf16 tensor-core rate (fp32's where there are none)
    mem_gbps: float
    l2_mb: float
    tdp_w: float

    @property
    def lanes(self) -> float:
        """FP32 lanes per SM per clock the spec counts (128 where it counts dual issue)."""
        return self.fp32_tflops * 1e6 / (2 * self.sms * self.boost_mhz)


def gpu_of(spec: Any) -> Gpu:
    """A Gpu from a catalogue device (``pimbuild/conf/device/*.yaml``) or a row of
    ``devices.csv``."""
    get = spec.get if isinstance(spec, dict) else lambda k, d=None: getattr(spec, k, d)
    def given(k: str) -> bool:  # a positive number (not None, "", 0, nor "???": unset)
        try:
            return float(get(k)) > 0
        except (TypeError, ValueError):
            return False

    missing = [k for k in ("sms", "boost_mhz", "tdp_w") if not given(k)]
    if missing:
        raise ConfigError(f"device '{get('name')}' lacks {', '.join(missing)}, which the "
                          f"fitted kernel-time model needs (spec-sheet numbers; or "
                          f"gpus.backend=roofline)")
    tensor = get("tensor_tflops") or get("bf16_tflops") or get("fp32_tflops")
    return Gpu(name=str(get("name")), sms=int(get("sms")), boost_mhz=float(get("boost_mhz")),
               fp32_tflops=float(get("fp32_tflops")), tensor_tflops=float(tensor),
               mem_gbps=float(get("mem_gbps")), l2_mb=float(get("l2_mb")),
               tdp_w=float(get("tdp_w")))


def blocks(o: Op, tile: int = 128) -> int:
    """The thread blocks a kernel of ``o`` runs, as the usual kernels tile it: a GEMM's
    ``tile`` x ``tile`` output tiles, prefill attention's ``tile`` query rows per sequence and
    head, decode attention's one block per sequence and KV head, a vector op's one per row."""
    if o.op in GEMMS:
        rows = o.b * o.m if o.op == "linear" else o.m
        return (1 if o.op == "linear" else o.b) * math.ceil(rows / tile) * math.ceil(o.k / tile)
    if o.op == "prefill_attention":
        return o.b * o.h * math.ceil(o.m / tile)
    if o.op == "decode_attention":
        return o.b * o.g
    return o.b


def waves(o: Op, gpu: Gpu, tile: int = 128) -> float:
    """Waves of ``tile`` x ``tile`` output tiles over the SMs (a GEMM's quantisation); the
    whole number of waves the last partial one rounds up to, over the exact count."""
    if o.op == "prefill_attention":  # a block of query rows per (sequence, head)
        exact = o.b * o.h * math.ceil(o.m / tile) / gpu.sms
        return math.ceil(exact) / exact
    if o.op not in GEMMS:
        return 1.0
    rows = o.b * o.m if o.op == "linear" else o.m
    batch = 1 if o.op == "linear" else o.b
    tiles = batch * math.ceil(rows / tile) * math.ceil(o.k / tile)
    exact = tiles / gpu.sms
    return math.ceil(exact) / exact


IR_FLOAT_BYTES = 4  # the IR's floats are float32 (the recipe's dtype)
ROW = 4096  # the row length given a vector kernel whose rows are unknown


def _vector(name: str, elements: int) -> tuple[str, int, int]:
    b = elements // ROW if elements % ROW == 0 and elements >= ROW else 1
    return name, b, elements // b


def from_kernel(kernel: dict[str, Any], floating: dict[str, bool], dtype: str) -> Op:
    """The op that stands for one of the GPU target's kernels (``kernels.json``) in the
    served ``dtype``: a contraction of inputs A (x elements), B (y) into C (z) over I
    iterations is a batched GEMM with ``B = xyz / I^2`` (1: a linear) and ``M = sqrt(xz /
    (yB))``, ``N = sqrt(yz / (xB))``, ``K = sqrt(xy / (zB))`` (so that B M N K = I); a
    reduction is a row op of ``I / outputs`` elements per row; any other kernel a vector op
    over its result's elements, binary when it streams two inputs of that size."""
    elems = {b: max(1, n // IR_FLOAT_BYTES) for b, n in kernel["reads"].items()
             if floating.get(b, True)}
    out = max((max(1, n // IR_FLOAT_BYTES) for n in kernel["writes"].values()), default=1)
    iters = max(1, int(kernel.get("iterations") or out))
    big = sorted(elems.values(), reverse=True)
    if kernel["kind"] == "contraction" and len(big) >= 2:
        # the two largest inputs, in operand order: A (shares M with C), then B
        x, y = [n for n in elems.values() if n >= big[1]][:2]
        z = out
        batch = max(1.0, x * y * z / iters**2)
        m, n, k = (max(1, round(math.sqrt(v / batch))) for v in (x * z / y, x * y / z,
                                                                   y * z / x))
        if batch < 1.5:
            return Op("linear", dtype, b=1, m=m, n=n, k=k)
        return Op("bmm", dtype, b=round(batch), m=m, n=n, k=k)
    if kernel["kind"] == "reduction":
        rows = max(1, out)
        return Op("sum", dtype, b=rows, h=max(1, iters // rows))
    streams = sum(1 for v in big if v >= out // 2)
    per = (kernel.get("flops") or 0) / iters
    name = "add" if streams >= 2 else "gelu" if per >= 4 else "addu"
    name, b, h = _vector(name, max(out, 1))
    return Op(name, dtype, b=b, h=h)
