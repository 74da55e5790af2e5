"""Measured grids: a device's engine-kernel times (``sources.ENGINE``) looked up exactly, or
interpolated between measured neighbours.

An op is *measured* where the grid holds its shape, *interpolated* where every corner of the
box of measured shapes around it is held: multilinear in log time over the log of each
interpolated dimension (a GEMM's rows, reduction and columns; attention's batch and length; a
vector op's rows), the others (heads, KV heads, head dimension, a prefill chunk's query length,
a vector op's row length) matched exactly, and no measured neighbour more
than ``SPAN`` times away on any dimension. Anything else is left to the fitted model
(``None``). How far interpolation is trusted is measured by ``held_out``: each interior grid
value of a dimension is dropped in turn and its rows interpolated from the values around it
(a box twice the grid's spacing, so the error it reports bounds the error between grid
points).

The measurements repeat one kernel, so a kernel whose operands fit in L2 runs from a warm
cache, faster than DRAM allows (the L40S's 96 MB L2 holds a 16-sequence, 1k-position KV
cache of one layer). A serving step streams each layer's weights and KV cache once, so
``cold`` raises a measured time to the DRAM time of the kernel's bytes at the GPU's
sustained bandwidth: the 95th percentile of the bandwidth its own measurements reach on
kernels that move more than twice its L2 (``sustained_bandwidth``)."""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from pimbuild.targets.gpus.kerneltime import ops, sources

# (the dimensions interpolated in log space, the dimensions matched exactly) per op; the rows
# of a linear are b*m
AXES = {"linear": (("m", "n", "k"), ()),
        # chunk: 0 for a whole prompt (m = n), else the chunk's query length
        "prefill_attention": (("b", "n"), ("chunk", "h", "g", "k")),
        "decode_attention": (("b", "n"), ("h", "g", "k")),
        **dict.fromkeys(ops.BINARY + ops.UNARY + ops.ROWS, (("b",), ("h",)))}
SPAN = 4.0  # the largest ratio between an op's dimension and a measured neighbour's


def coordinates(o: ops.Op) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """(interpolated, exact) coordinates of ``o`` on a grid; None for an op grids lack."""
    if o.op not in AXES:
        return None
    interp, exact = AXES[o.op]
    values = {"m": o.b * o.m if o.op == "linear" else o.m, "chunk": 0 if o.m == o.n else o.m,
              **{d: getattr(o, d) for d in ("b", "n", "k", "h", "g")}}
    if o.op == "linear":
        values["b"] = 1
    return tuple(values[d] for d in interp), (o.dtype, *(values[d] for d in exact))


@dataclass
class Grid:
    """One device's measured times (seconds) by op and coordinates."""
    times: dict[str, dict[tuple, dict[tuple[int, ...], float]]] = field(default_factory=dict)
    axes: dict[str, dict[tuple, list[list[int]]]] = field(default_factory=dict)
    dram_bps: float = 0.0  # sustained DRAM bytes per second (0: no cold-cache floor)

    def cold(self, o: ops.Op, seconds: float) -> float:
        """``seconds`` raised to the time ``o``'s bytes take from DRAM (see the module)."""
        return max(seconds, o.work()[1] / self.dram_bps) if self.dram_bps else seconds

    def add(self, o: ops.Op, seconds: float) -> None:
        c = coordinates(o)
        if c is None:
            return
        point, exact = c
        cell = self.times.setdefault(o.op, {}).setdefault(exact, {})
        cell[point] = min(seconds, cell.get(point, seconds))
        self.axes.pop(o.op, None)  # rebuilt on the next lookup

    def _axes(self, op: str, exact: tuple) -> list[list[int]]:
        per = self.axes.setdefault(op, {})
        if exact not in per:
            points = self.times[op][exact]
            per[exact] = [sorted({p[i] for p in points}) for i in range(len(next(iter(points))))]
        return per[exact]

    def lookup(self, o: ops.Op) -> tuple[float, str] | None:
        """(seconds, "measured" or "interpolated"), or None where the grid cannot say."""
        c = coordinates(o)
        if c is None or o.op not in self.times or c[1] not in self.times[o.op]:
            return None
        point, exact = c
        cell = self.times[o.op][exact]
        if point in cell:
            return cell[point], "measured"
        t = interpolate(cell, self._axes(o.op, exact), point)
        return None if t is None else (t, "interpolated")


def _bracket(axis: list[int], x: int) -> tuple[int, ...] | None:
    i = bisect.bisect_left(axis, x)
    if i < len(axis) and axis[i] == x:
        return (x,)
    if i == 0 or i == len(axis) or axis[i] / axis[i - 1] > SPAN ** 2 \
            or x / axis[i - 1] > SPAN or axis[i] / x > SPAN:
        return None
    return axis[i - 1], axis[i]


def interpolate(cell: dict[tuple[int, ...], float], axes: list[list[int]],
                point: tuple[int, ...]) -> float | None:
    """Multilinear interpolation of log time over log dimensions; None unless every corner
    of the bracketing box is measured."""
    brackets = [_bracket(a, x) for a, x in zip(axes, point, strict=True)]
    if any(b is None for b in brackets):
        return None
    log_t = 0.0
    for corner in itertools.product(*brackets):
        if corner not in cell:
            return None
        weight = 1.0
        for b, c, x in zip(brackets, corner, point, strict=True):
            if len(b) == 2:
                f = math.log(x / b[0]) / math.log(b[1] / b[0])
                weight *= f if c == b[1] else 1 - f
        log_t += weight * math.log(cell[corner])
    return math.exp(log_t)


def build(frame: Any, gpus: dict[str, ops.Gpu] | None = None) -> dict[str, Grid]:
    """Grids by measured device from ``sources.load_engine``'s frame; with the devices'
    specs (``gpus``), each with its sustained DRAM bandwidth."""
    grids: dict[str, Grid] = {}
    for device, part in frame.groupby("device"):
        g = grids[device] = Grid()
        for o, _, t in sources.frame_ops(part):
            g.add(o, t)
        if gpus and device in gpus:
            g.dram_bps = sustained_bandwidth(part, gpus[device])
    return grids


def moved_bytes(frame: Any) -> np.ndarray:
    """Each row's bytes moved at least once (``ops.Op.work``'s, vectorised for GEMMs and
    attention, the bulk of a grid)."""
    e = frame["dtype"].map(ops.DTYPE_BYTES).to_numpy(dtype=float)
    b, m, n, k, h, g = (frame[c].to_numpy(dtype=float) for c in ("b", "m", "n", "k", "h", "g"))
    op = frame["op"].to_numpy()
    moved = np.where(op == "linear", e * (b * m * n + n * k + b * m * k),
                     e * b * k * (2 * m * h + 2 * n * g))
    vector = ~np.isin(op, ("linear", *ops.ATTENTION))
    if vector.any():
        moved[vector] = [o.work()[1] for o, _, _ in sources.frame_ops(frame[vector])]
    return moved


def sustained_bandwidth(frame: Any, gpu: ops.Gpu) -> float:
    """Bytes per second: the 95th percentile reached by kernels moving over twice the L2
    (0 when fewer than 100 do)."""
    moved = moved_bytes(frame)
    seconds = frame["time_us"].to_numpy(dtype=float) * 1e-6
    big = moved > 2 * gpu.l2_mb * 2**20
    return float(np.percentile(moved[big] / seconds[big], 95)) if big.sum() >= 100 else 0.0


def load(names: list[str], path: Any = sources.ENGINE) -> dict[str, Grid]:
    """The grids of the measured GPUs called ``names`` in the engine-kernel file at ``path``,
    with their sustained bandwidths."""
    return build(sources.load_engine(path, names), sources.devices()) if names else {}


def held_out(grid: Grid) -> list[dict[str, Any]]:
    """Each interior value of each interpolated dimension dropped in turn, its rows
    interpolated from the rest: per op and dimension, rows, median, 90th percentile and the
    share within 10% of |interpolated / measured - 1|, and the share the grid could not
    interpolate."""
    out = []
    for op, cells in grid.times.items():
        names = AXES[op][0]
        for d, name in enumerate(names):
            errs, missed = [], 0
            for exact, cell in cells.items():
                axes = grid._axes(op, exact)
                for value in axes[d][1:-1]:
                    fewer = [a if i != d else [v for v in a if v != value]
                             for i, a in enumerate(axes)]
                    rest = {p: t for p, t in cell.items() if p[d] != value}
                    for p, t in cell.items():
                        if p[d] != value:
                            continue
                        got = interpolate(rest, fewer, p)
                        if got is None:
                            missed += 1
                        else:
                            errs.append(abs(got / t - 1))
            if errs:
                e = np.array(errs)
                out.append({"op": op, "dimension": name, "rows": len(e),
                            "median": float(np.median(e)),
                            "p90": float(np.percentile(e, 90)),
                            "within_10": float(np.mean(e <= 0.1)),
                            "not_interpolated": missed / (missed + len(e))})
    return out
