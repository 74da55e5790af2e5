"""The systems the serving simulation compares (``pimbuild.targets.gpus.systems.serving``): the
planned placements of both phases (and the other planner's, for the online monitor), each
device alone, request distribution, PD disaggregation over the splits of the devices in two,
AF disaggregation, and AF with tensor-parallel attention on twins; several devices serving a
phase as instances of their own take the requests in turn (``in_turn``)."""

from __future__ import annotations

from dataclasses import replace
from math import lcm
from typing import Any

from pimbuild.targets.gpus import planners
from pimbuild.targets.gpus.costmodel.cost import Link
from pimbuild.targets.gpus.systems.closedform import af_ways
from pimbuild.targets.gpus.systems.devicesets import first_of_kind, two_sets
from pimbuild.targets.gpus.systems.serving import (
    Phase,
    Plan,
    System,
    kv_map,
    weighted,
    without_home_results,
)


def _phase(ctx: Any, place: list[int], data: dict[str, Any], device: int | None = None,
           kept: set[str] = frozenset()) -> Phase:
    """A planner context's phase; ``device``: that device alone (a one-device graph)."""
    g = without_home_results(ctx.graph, kept)
    times = ctx.times if device is None else [[row[device]] for row in ctx.times]
    return Phase(g, place if device is None else [0] * len(place), times,
                 data.get("layers", 1), data.get("prompt", 0))


def alternative(planner: str, ctx: Any, planned: list[int]) -> list[int]:
    """The monitor's other placement: ``planner`` started from the planned placement.
    Over a period of layers, one layer's placement repeated (FluidGPU's reuse): the
    latency MILP over a whole model's layers does not finish (Llama-3-8B's 32: past 60 s)."""
    one = planners.one_layer(ctx)
    n = len(one.graph.kernels)
    plan = planners.place(planner, replace(one, start=tuple(planned[:n]), options=None))
    return plan.place * (len(planned) // n)


def systems(pre: tuple, dec: tuple, devices: list[Any], planner: str, monitor: bool,
            order: tuple[list[int], list[int]] | None = None, limit: int | None = None,
            tp_ways: list[tuple[Any, Any]] = ()) -> dict[str, System]:
    """The planned system (with the other planner's placements for the monitor) and the
    baselines: each device alone, request distribution (a replica on every device), PD and
    AF (where the model has attention and other kernels) on the splits of the devices in
    two. ``pre``/``dec``: (planner context, planned placement, kernels.json) of the prefill
    and decode phases; ``order``: PD's and AF's splits best first (``closedform.ranked``), of
    which the first ``limit`` are simulated (default: every split); ``tp_ways``: AF with TP
    attention on a group of twins, ``tp.ways``' prefill and decode way of each group."""
    (pc, pp, pd_), (dc, dp, dd) = pre, dec
    kept = set(kv_map(pd_, dd))
    n, price = len(devices), sum(d.price_per_hour for d in devices)
    plans = {planner: Plan(_phase(pc, pp, pd_, kept=kept), _phase(dc, dp, dd))}
    other = {"throughput": "latency", "latency": "throughput"}.get(planner)
    if monitor and other:  # the other planner's placements, started from the planned ones
        alt = [alternative(other, c, p) for c, p in ((pc, pp), (dc, dp))]
        plans[other] = Plan(_phase(pc, alt[0], pd_, kept=kept), _phase(dc, alt[1], dd))
    out = {"planned": System(plans, n, price)}
    alone = []
    for d, dev in enumerate(devices):
        one = Plan(_phase(pc, pp, pd_, d, kept), _phase(dc, dp, dd, d))
        alone.append(System({"alone": one}, 1, dev.price_per_hour))
        if first_of_kind(devices, [[d]], home=None):  # alone, a device is its own home
            out[f"{dev.key} alone"] = alone[-1]
    out["request distribution"] = System({}, n, price, alone)
    pd_order, af_order = order or (None, None)
    out |= pd_systems(pre, dec, devices, kept, pd_order, limit)
    out |= af_systems(pre, dec, devices, kept, af_order, limit)
    for way, dec_way in tp_ways:  # two_sets' index of the split with attention on the group
        out |= af_systems((way.ctx, pp, pd_), (dec_way.ctx, dp, dd), way.devices, kept,
                          order=[(1 << way.at) - 1], limit=1)
    return out


def in_turn(prefill: list[Phase], decode: list[Phase], link: Link, n_dev: int
            ) -> tuple[Plan, ...]:
    """Plans taking the requests in turn, each instance in proportion to its rate (one over
    its forward's critical path; ``weighted``): the n-th request prefills on the n-th pick of
    ``prefill`` and decodes on the n-th pick of ``decode``, as PD's closed form adds the
    instances' rates. Equal instances take plain turns (``lcm(P, D)`` plans), others
    ``TURNS``. One Phase object per instance, so the requests of one decode instance share
    its batches."""
    pre = [p.critical_path(link, n_dev) for p in prefill]
    dec = [p.critical_path(link, n_dev) for p in decode]
    n = lcm(len(pre), len(dec)) if len(set(pre)) == 1 and len(set(dec)) == 1 else TURNS
    return tuple(Plan(prefill[i], decode[j])
                 for i, j in zip(weighted(pre, n), weighted(dec, n), strict=True))


TURNS = 120  # plans in a cycle of instances with different rates (shares to within 1/120)


def pd_systems(pre: tuple, dec: tuple, devices: list[Any], kept: set[str],
               order: list[int] | None = None, limit: int | None = None
               ) -> dict[str, System]:
    """PD disaggregation on the splits of the devices in two (``order``: indices into
    ``two_sets``, best first; the first ``limit`` of them): each prefill device and each
    decode device an instance of its own (``in_turn``). On two devices "PD (prefill on X)";
    on more the decode set is named too; of twin splits (``devicesets.first_of_kind``) only the
    first."""
    (pc, pp, pd_), (dc, dp, dd) = pre, dec
    n, price = len(devices), sum(d.price_per_hour for d in devices)
    out: dict[str, System] = {}
    sets = two_sets(n)
    for i in _picked(devices, sets, order, limit):
        first, rest = sets[i]
        name = f"PD (prefill on {_names(devices, first)}" + (
            f", decode on {_names(devices, rest)})" if n > 2 else ")")
        turns = in_turn([_phase(pc, [p] * len(pp), pd_, kept=kept) for p in first],
                        [_phase(dc, [d] * len(dp), dd) for d in rest], pc.link, n)
        out[name] = System({"pd": turns}, n, price)
    return out


def af_systems(pre: tuple, dec: tuple, devices: list[Any], kept: set[str],
               order: list[int] | None = None, limit: int | None = None
               ) -> dict[str, System]:
    """AF disaggregation on the splits of the devices in two (``closedform.af_ways``: a set
    of several devices takes the requests in turn, a request's prefill and decode on the
    same turn, so its KV cache stays where its attention runs; ``order`` and ``limit`` as in
    ``pd_systems``); none without that structure; of twin splits only the first."""
    (pc, _, pd_), (dc, _, dd) = pre, dec
    price = sum(d.price_per_hour for d in devices)
    pre_ways, dec_ways = af_ways(pc, devices), af_ways(dc, devices)
    if not (pre_ways and dec_ways):
        return {}
    out: dict[str, System] = {}
    for i in _picked(devices, two_sets(len(devices)), order, limit):  # af_ways' order
        (name, pre_turns), (_, dec_turns) = pre_ways[i], dec_ways[i]
        out[f"AF (attention on {name})"] = System({"af": tuple(
            Plan(_phase(pc, a, pd_, kept=kept), _phase(dc, b, dd))
            for a, b in zip(pre_turns, dec_turns, strict=True))}, len(devices), price)
    return out


def _picked(devices: list[Any], sets: list, order: list[int] | None, limit: int | None
            ) -> list[int]:
    """The indices ``i`` in ``order`` (default: all, in turn) whose ``sets[i]`` is no
    twin's (``devicesets.first_of_kind``), at most ``limit``."""
    chosen = [i for i in (range(len(sets)) if order is None else order)
              if first_of_kind(devices, list(sets[i]))]
    return chosen if limit is None else chosen[:limit]


def _names(devices: list[Any], on: list[int]) -> str:
    return "+".join(devices[d].key for d in on)
