"""The GPU target's placements in the cost model (``pimbuild.targets.gpus.costmodel.cost``): one
placement's throughput, latency, Perf/$ and bytes moved (``evaluate``, ``evaluate_turns``), and
the baselines FluidGPU compares with (``baselines``): each device alone, request distribution,
AF disaggregation (and AF with tensor-parallel attention on twins), a layer pipeline."""

from __future__ import annotations

from dataclasses import dataclass
from statistics import fmean
from typing import Any

from pimbuild.targets.gpus import planners
from pimbuild.targets.gpus.costmodel import cost, ddg
from pimbuild.targets.gpus.costmodel.cost import Link
from pimbuild.targets.gpus.systems import closedform, pipeline, tp


@dataclass(frozen=True)
class Unit:
    """What one forward yields and how throughput is counted (from the recipe)."""

    layers: int
    tokens: int
    name: str  # tokens | requests
    forwards_per_request: int
    period: int = 1  # layers in the placed graph (gpus.period); the model repeats it

    @property
    def repeats(self) -> int:
        return self.layers // self.period

    @property
    def label(self) -> str:
        return "tokens/s" if self.name == "tokens" else "requests/min"

    def rate(self, cycle_s: float) -> float:
        """Throughput at a cycle time of ``cycle_s`` per layer."""
        per_s = self.tokens / (self.layers * cycle_s)
        return per_s if self.name == "tokens" else 60 * per_s / self.forwards_per_request


def evaluate(ctx: Any, place: list[int], unit: Unit, price: float) -> dict[str, Any]:
    """A placement of ``ctx``'s graph (``unit.period`` layers) in the cost model; its cycle
    time and bytes moved are per layer, its latency the whole forward's."""
    return evaluate_turns(ctx, [place], unit, price)


def evaluate_turns(ctx: Any, places: list[list[int]], unit: Unit, price: float
                   ) -> dict[str, Any]:
    """``evaluate`` for placements that successive requests take in turn
    (``cost.turns_cycle_time``): latency, bytes moved and kernels per device are the mean
    request's."""
    def cycle(kappa: float) -> float:
        return cost.turns_cycle_time(ctx.graph, places, ctx.times, ctx.link, ctx.n_dev,
                                     kappa) / unit.period

    path = fmean(cost.critical_path(ctx.graph, p, ctx.times, ctx.link, ctx.n_dev)
                 for p in places)
    moved = fmean(sum(size for *_, size in ddg.transfers(ctx.graph, p))
                  for p in places) / unit.period
    rate = unit.rate(cycle(ctx.comm_on_device))
    on_device = [sum(p.count(d) for p in places) / len(places) for d in range(ctx.n_dev)]
    return {"cycle_s": cycle(ctx.comm_on_device), "latency_s": unit.repeats * path,
            "throughput": rate, "perf_per_dollar": rate / price, "price_per_hour": price,
            # the paper's own cost model (its SV-D): transfers fully overlapped with compute
            "throughput_overlapped": unit.rate(cycle(0.0)),
            "transfer_bytes": moved,
            "on_device": [int(c) if c == int(c) else round(c, 2) for c in on_device]}


def layer_pipeline(ctx: Any, devices: list[Any], unit: Unit, price: float
                   ) -> dict[str, Any] | None:
    """Pipeline parallelism over the model's identical layers: contiguous segments of whole
    layers, one per device, over two or more of them (the best split and order,
    ``pipeline.best``; each layer's weights on one device only), evaluated on the unrolled
    model in the same cost model. Its cycle time and bytes moved are per layer (the model's
    over ``layers``), as the planned placement's are; its latency is the whole forward's and
    ``on_device`` counts the model's kernels. None for one layer or one device."""

    split = pipeline.best(ctx, unit.layers)
    if split is None:
        return None
    whole = planners.unrolled(ctx, unit.layers)
    once = Unit(unit.layers, unit.tokens, unit.name, unit.forwards_per_request,
                period=unit.layers)
    return evaluate(whole, split.place(len(ctx.graph.kernels)), once, price) | {
        "layers_on": {devices[d].key: m for d, m in zip(split.order, split.counts,
                                                        strict=True)}}


def baselines(ctx: Any, devices: list[Any], unit: Unit, tp_link: Link | None = None
              ) -> dict[str, Any]:
    """Each device alone, request distribution, AF disaggregation, AF with tensor-parallel
    attention on twin devices joined by ``tp_link`` (``pimbuild.targets.gpus.systems.tp``; None: not
    evaluated) and the layer pipeline, in the cost model."""
    n = len(ctx.graph.kernels)
    out: dict[str, Any] = {}
    for d, dev in enumerate(devices):
        single = [[row[d]] for row in ctx.times]  # the device alone: nothing moves
        alone = type(ctx)(ctx.graph, single, ctx.link, 1, ctx.comm_on_device)
        out[f"{dev.key} alone"] = evaluate(alone, [0] * n, unit, dev.price_per_hour)
    total = sum(dev.price_per_hour for dev in devices)
    rd = sum(out[f"{dev.key} alone"]["throughput"] for dev in devices)
    out["request distribution"] = {"throughput": rd, "perf_per_dollar": rd / total,
                                   "price_per_hour": total}
    ways = [evaluate_turns(ctx, turns, unit, total) | {"attention_on": name}
            for name, turns in closedform.af_ways(ctx, devices)]
    if ways:
        out["AF disaggregation"] = max(ways, key=lambda r: r["throughput"])
    grouped = [evaluate_turns(way.ctx, way.turns, unit, total) | {"attention_on": way.name}
               for way in tp.ways(ctx, devices, tp_link)] if tp_link else []
    if grouped:
        out["AF disaggregation (TP)"] = max(grouped, key=lambda r: r["throughput"])
    pipeline = layer_pipeline(ctx, devices, unit, total)
    if pipeline is not None:
        out["layer pipeline"] = pipeline
    return out
