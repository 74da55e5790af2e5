"""Offline serving of a prefill + decode workload in the cost model, in closed form
(docs/design.md §10).

A request has ``input_len`` prompt tokens and ``output_len`` output tokens; decode runs in
batches of ``batch`` requests. With a placement that pipelines requests over the devices (a
planner's, AF's, one device's), a batch of ``batch`` requests costs ``batch`` prefill forwards
and ``output_len`` decode steps, each at its cycle time, so

    tokens/s = batch * output_len / (batch * T_prefill + output_len * T_decode)

where ``T_prefill`` and ``T_decode`` are whole-model cycle times (``layers x`` one layer's).
PD disaggregation runs prefill on some devices and decode on the others (each an independent
instance: their rates add), pipelined with each other, and ships every request's KV cache
over the link (on as many links at once as the smaller side has devices):

    requests/s = min(sum_P 1 / T_prefill(p), sum_D batch / (output_len * T_decode(d)),
                     min(|P|, |D|) / t_link(KV))

Request distribution runs the whole workload on every device as a replica and adds their
rates.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import lcm
from typing import Any

from pimbuild.targets.gpus.costmodel.cost import Link, turns_cycle_time
from pimbuild.targets.gpus.systems.devicesets import two_sets

# a kernel whose source module's name holds one of these is attention's (AF's split)
ATTENTION = ("attn", "attention")


@dataclass(frozen=True)
class Workload:
    input_len: int = 1020
    output_len: int = 129
    batch: int = 16


def mixed(w: Workload, prefill_s: float, decode_s: float) -> float:
    """Output tokens/s of one placement serving both phases, pipelined."""
    return w.batch * w.output_len / (w.batch * prefill_s + w.output_len * decode_s)


def pd_rates(w: Workload, prefill_s: list[float], decode_s: list[float], kv_bytes: int,
             link: Link) -> dict[str, float]:
    """Requests/s of PD disaggregation's three stages: prefill on devices taking
    ``prefill_s`` each, decode on devices taking ``decode_s`` a step, the KV transfers."""
    return {"prefill": sum(1 / t for t in prefill_s),
            "decode": sum(w.batch / (w.output_len * t) for t in decode_s),
            "KV transfer": min(len(prefill_s), len(decode_s)) / link.seconds(kv_bytes)}


def pd(w: Workload, prefill_s: list[float], decode_s: list[float], kv_bytes: int,
       link: Link) -> float:
    """Output tokens/s of PD disaggregation (``pd_rates``): its slowest stage's."""
    return min(pd_rates(w, prefill_s, decode_s, kv_bytes, link).values()) * w.output_len


def pd_bottleneck(w: Workload, prefill_s: list[float], decode_s: list[float], kv_bytes: int,
                  link: Link) -> str:
    rates = pd_rates(w, prefill_s, decode_s, kv_bytes, link)
    return min(rates, key=rates.get)


def ranked(w: Workload, pre: Phase, dec: Phase, link: Link) -> tuple[list[int], list[int]]:
    """The splits of the devices in two (indices into ``two_sets``) best first by the
    closed forms: PD's (``pd``) and AF's (``mixed``; ``Phase.af`` holds them in that order;
    none without AF)."""
    sets = two_sets(len(pre.alone))
    pd_rate = [pd(w, [pre.alone[d] for d in a], [dec.alone[d] for d in b], pre.state_bytes,
                  link) for a, b in sets]
    af_rate = [mixed(w, pre.af[k], dec.af[k]) for k in pre.af] if pre.af and dec.af else []
    return (sorted(range(len(pd_rate)), key=lambda i: -pd_rate[i]),
            sorted(range(len(af_rate)), key=lambda i: -af_rate[i]))


@dataclass(frozen=True)
class Phase:
    """One phase's whole-model costs in seconds: the planned placement's cycle time, each
    device alone, AF disaggregation on each split of the devices (by the attention devices'
    names; None without that structure), and the bytes a request's forward leaves as state
    (a prefill's KV cache)."""

    planned: float
    alone: list[float]
    af: dict[str, float] | None
    state_bytes: int
    af_tp: dict[str, float] | None = None  # AF with TP attention, by the group's name


def phase(ctx, place: list[int], layers: int,
          af: list[tuple[str, list[list[int]]]],
          tp: list[Any] = ()) -> Phase:
    """``ctx``: a planner's PlanContext; ``af``: AF's ways (``af_ways``); ``tp``:
    AF's ways with TP attention, each in its grouped context (``tp.ways``)."""
    def cycle(turns: list[list[int]], c=ctx) -> float:
        return layers * turns_cycle_time(c.graph, turns, c.times, c.link, c.n_dev,
                                         c.comm_on_device)

    g = ctx.graph
    state = sum(g.buffer_bytes[b] for b in g.outputs if b not in g.carry.values())
    return Phase(cycle([place]), [layers * sum(row[d] for row in ctx.times)
                                  for d in range(ctx.n_dev)],
                 {name: cycle(turns) for name, turns in af} or None, layers * state,
                 {way.name: cycle(way.turns, way.ctx) for way in tp} or None)


def compare(w: Workload, pre: Phase, dec: Phase, keys: list[str], prices: list[float],
            link: Link) -> dict[str, dict]:
    """Output tokens/s and Perf/$ of the planned placements and every baseline serving ``w``
    on the devices ``keys`` (their ``prices``), with the PD split's bottleneck. PD and AF:
    the best split of the devices in two (none on one device)."""
    total, n = sum(prices), len(keys)
    rows = {"planned": (mixed(w, pre.planned, dec.planned), total)}
    for d, key in enumerate(keys):
        rows[f"{key} alone"] = (mixed(w, pre.alone[d], dec.alone[d]), prices[d])
    rows["request distribution"] = (sum(rows[f"{k} alone"][0] for k in keys), total)
    ways = []
    for on in two_sets(n):
        args = ([pre.alone[d] for d in on[0]], [dec.alone[d] for d in on[1]],
                pre.state_bytes, link)
        ways.append((pd(w, *args), on, pd_bottleneck(w, *args)))
    out = {name: {"tokens_per_s": r, "perf_per_dollar": r / price}
           for name, (r, price) in rows.items()}
    if ways:  # two devices or more
        best, (prefill_on, decode_on), bottleneck = max(ways, key=lambda way: way[0])
        out["PD disaggregation"] = {
            "tokens_per_s": best, "perf_per_dollar": best / total,
            "prefill_on": "+".join(keys[d] for d in prefill_on),
            "decode_on": "+".join(keys[d] for d in decode_on),
            "kv_bytes_per_request": pre.state_bytes, "bottleneck": bottleneck}
    if pre.af and dec.af:
        r, name = max((mixed(w, pre.af[name], dec.af[name]), name) for name in pre.af
                      if name in dec.af)
        out["AF disaggregation"] = {"tokens_per_s": r, "perf_per_dollar": r / total,
                                    "attention_on": name}
    if pre.af_tp and dec.af_tp:
        r, name = max((mixed(w, pre.af_tp[name], dec.af_tp[name]), name)
                      for name in pre.af_tp if name in dec.af_tp)
        out["AF disaggregation (TP)"] = {"tokens_per_s": r, "perf_per_dollar": r / total,
                                         "attention_on": name}
    return out


def af_split(ctx: Any) -> list[int] | None:
    """Attention kernels on one side, the rest on the other; None without that structure."""
    attn = [any(a in k.source_module.lower() for a in ATTENTION) for k in ctx.graph.kernels]
    if all(attn) or not any(attn):
        return None
    return [0 if a else 1 for a in attn]


def af_ways(ctx: Any, devices: list[Any]) -> list[tuple[str, list[list[int]]]]:
    """AF disaggregation on every split of the devices in two: attention kernels on one set,
    the rest on the other, a set of several taking the requests in turn (``lcm`` of the two
    sizes turns; the paper runs attention on its 2 A100s with TP=2 instead, which without its
    all-reduce loads each the same); (the attention devices' names, the turns). Empty
    without that structure; on two devices attention on the first, then on the second."""
    split = af_split(ctx)
    if split is None:
        return []
    ways = []
    for attn, rest in two_sets(len(devices)):
        turns = [[attn[i % len(attn)] if s == 0 else rest[i % len(rest)] for s in split]
                 for i in range(lcm(len(attn), len(rest)))]
        ways.append(("+".join(devices[d].key for d in attn), turns))
    return ways
