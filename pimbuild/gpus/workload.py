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
