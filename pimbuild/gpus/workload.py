"""Offline serving of a prefill + decode workload in the cost model (docs/design.md §10).

A request has ``input_len`` prompt tokens and ``output_len`` output tokens; decode runs in
batches of ``batch`` requests. With a placement that pipelines requests over the devices (a
planner's, AF's, one device's), a batch of ``batch`` requests costs ``batch`` prefill forwards
and ``output_len`` decode steps, each at its cycle time, so

    tokens/s = batch * output_len / (batch * T_prefill + output_len * T_decode)

where ``T_prefill`` and ``T_decode`` are whole-model cycle times (``layers x`` one layer's).
PD disaggregation runs prefill on one device and decode on the other, pipelined with each
other, and ships every request's KV cache over the link:

    requests/s = min(1 / T_prefill(P), batch / (output_len * T_decode(D)), 1 / t_link(KV))

Request distribution runs the whole workload on every device as a replica and adds their
rates.
"""

from __future__ import annotations

from dataclasses import dataclass

from pimbuild.gpus.cost import Link


@dataclass(frozen=True)
class Workload:
    input_len: int = 1020
    output_len: int = 129
    batch: int = 16


def mixed(w: Workload, prefill_s: float, decode_s: float) -> float:
    """Output tokens/s of one placement serving both phases, pipelined."""
    return w.batch * w.output_len / (w.batch * prefill_s + w.output_len * decode_s)


def pd(w: Workload, prefill_s: float, decode_s: float, kv_bytes: int, link: Link) -> float:
    """Output tokens/s of PD disaggregation: prefill on one device, decode on another."""
    rate = min(1 / prefill_s, w.batch / (w.output_len * decode_s), 1 / link.seconds(kv_bytes))
    return rate * w.output_len


def pd_bottleneck(w: Workload, prefill_s: float, decode_s: float, kv_bytes: int,
                  link: Link) -> str:
    rates = {"prefill": 1 / prefill_s, "decode": w.batch / (w.output_len * decode_s),
             "KV transfer": 1 / link.seconds(kv_bytes)}
    return min(rates, key=rates.get)


@dataclass(frozen=True)
class Phase:
    """One phase's whole-model costs in seconds: the planned placement's cycle time, each
    device alone, AF disaggregation both ways round (None without that structure), and the
    bytes a request's forward leaves as state (a prefill's KV cache)."""

    planned: float
    alone: list[float]
    af: list[float] | None
    state_bytes: int


def phase(ctx, place: list[int], layers: int, af: list[int] | None) -> Phase:
    """``ctx``: a planner's PlanContext; ``af``: the AF split (attention on device 0)."""
    from pimbuild.gpus.cost import cycle_time

    def cycle(p: list[int]) -> float:
        return layers * cycle_time(ctx.graph, p, ctx.times, ctx.link, ctx.n_dev,
                                   ctx.comm_on_device)

    g = ctx.graph
    state = sum(g.buffer_bytes[b] for b in g.outputs if b not in g.carry.values())
    return Phase(cycle(place), [layers * sum(row[d] for row in ctx.times)
                                for d in range(ctx.n_dev)],
                 [cycle(af), cycle([1 - d for d in af])] if af else None, layers * state)


def compare(w: Workload, pre: Phase, dec: Phase, keys: list[str], prices: list[float],
            link: Link) -> dict[str, dict]:
    """Output tokens/s and Perf/$ of the planned placements and every baseline serving ``w``
    on two devices (``keys``, their ``prices``), with the PD split's bottleneck."""
    total = sum(prices)
    rows = {"planned": (mixed(w, pre.planned, dec.planned), total)}
    for d, key in enumerate(keys):
        rows[f"{key} alone"] = (mixed(w, pre.alone[d], dec.alone[d]), prices[d])
    rows["request distribution"] = (sum(rows[f"{k} alone"][0] for k in keys), total)
    ways = [(pd(w, pre.alone[p], dec.alone[1 - p], pre.state_bytes, link), p) for p in (0, 1)]
    best, p = max(ways)
    rows["PD disaggregation"] = (best, total)
    out = {name: {"tokens_per_s": r, "perf_per_dollar": r / price}
           for name, (r, price) in rows.items()}
    out["PD disaggregation"] |= {
        "prefill_on": keys[p], "kv_bytes_per_request": pre.state_bytes,
        "bottleneck": pd_bottleneck(w, pre.alone[p], dec.alone[1 - p], pre.state_bytes, link)}
    if pre.af and dec.af:
        r, i = max((mixed(w, pre.af[i], dec.af[i]), i) for i in (0, 1))
        out["AF disaggregation"] = {"tokens_per_s": r, "perf_per_dollar": r / total,
                                    "attention_on": keys[i]}
    return out
