"""Stage ``simulate`` of the GPU target: what the placement buys, in the cost model
(``pimbuild.targets.gpus.cost``), against the baselines FluidGPU compares with.

For the planned placement and every baseline: the cycle time of pipelined requests (the
throughput the MILP optimises), one forward's critical path, the throughput (output tokens/s =
``tokens / (layers x cycle time)``; for a model whose requests are ``forwards_per_request``
forwards, such as a diffusion model's denoising steps, requests/min), and Perf/$ = throughput
per USD-hour of the devices it rents. Baselines: each device alone; request distribution
(every device a full replica, throughputs added); AF disaggregation (attention kernels on
one device, the rest on the other, the better way round) where the model has attention and
other kernels. A model with a prefill phase (``model.phases.prefill``; the stage's
``PHASE_READS``) is also served: prefill + ``serve.output_len`` decode steps per request, in
the closed forms of ``pimbuild.targets.gpus.workload`` (PD disaggregation among the baselines)
and in the discrete-event simulation of ``pimbuild.targets.gpus.serving`` (every baseline, the
online monitor, the highest rate within the SLO). Writes ``report.json`` and ``report.md``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pimbuild.check import outcome
from pimbuild.errors import ConfigError, StageError
from pimbuild.stage import Inputs
from pimbuild.targets.gpus import cost, ddg, decide, pipeline, planners, robust, tp, workload
from pimbuild.targets.gpus import (
    serving as des,  # the discrete-event simulation (``serving`` is a step)
)
from pimbuild.targets.gpus.arrivals import ARRIVALS
from pimbuild.targets.gpus.cost import Link

NAME = "simulate"
READS = ("extract", "profile", "decide", "reinsert")
# A model with a prefill phase (model.phases.prefill) is also served: prefill + decode.
PHASE_READS = {"prefill": ("extract", "profile", "decide")}
WRITES = ("report.json", "report.md")


@dataclass(frozen=True)
class Serve:
    output_len: int
    slo_s_per_token: float
    requests: int
    arrivals: str
    rate: float
    trace: str | None  # absolute path
    trace_digest: str | None  # the trace file's content, so that an edit rebuilds
    seed: int
    depth: int
    monitor: bool
    window_s: float
    beta: float
    stall_s: float
    splits: int


@dataclass(frozen=True)
class Params:
    decide: decide.Params
    serve: Serve
    tp_link: Link  # joins the twins of AF's tensor-parallel attention group
    robust_samples: int = 0  # draws of the kernel-time model's error (pimbuild.targets.gpus.robust)


def params(cfg: DictConfig) -> Params:
    return Params(decide=decide.params(cfg), serve=serve_params(cfg),
                  tp_link=Link(cfg.tp_link.gbps, cfg.tp_link.latency_us),
                  robust_samples=cfg.gpus.robust_samples)


def serve_params(cfg: DictConfig) -> Serve:
    import hashlib

    from hydra.utils import to_absolute_path

    s = cfg.serve
    if s.arrivals not in ARRIVALS:
        raise ConfigError(f"serve.arrivals={s.arrivals}: choose one of {', '.join(ARRIVALS)}")
    trace = digest = None
    if s.arrivals == "trace":
        if not s.trace:
            raise ConfigError("serve.arrivals=trace needs serve.trace=<CSV file>")
        trace = to_absolute_path(s.trace)
        try:
            digest = hashlib.sha256(Path(trace).read_bytes()).hexdigest()
        except OSError as e:
            raise ConfigError(f"cannot read serve.trace {trace}: {e.strerror}") from None
    return Serve(s.output_len, s.slo_s_per_token, s.requests, s.arrivals, s.rate, trace,
                 digest, s.seed, s.depth, s.monitor, s.window_s, s.beta, s.stall_s, s.splits)


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
    from statistics import fmean

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
    attention on twin devices joined by ``tp_link`` (``pimbuild.targets.gpus.tp``; None: not
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
            for name, turns in workload.af_ways(ctx, devices)]
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


def run(inputs: Inputs, p: Params, out: Path) -> None:
    one = decide.layer_context(inputs, p.decide)
    ctx = decide.context(inputs, p.decide, one)
    data = json.loads((inputs["extract"] / "kernels.json").read_text())
    placement = json.loads((inputs["decide"] / "placement.json").read_text())
    profile = json.loads((inputs["profile"] / "profile.json").read_text())
    target = p.decide.profile.target
    devices = list(target.devices)
    unit = Unit(data.get("layers", 1), data.get("tokens", 1), data.get("unit", "tokens"),
                data.get("forwards_per_request", 1))
    price = sum(d.price_per_hour for d in devices)
    planned = evaluate(ctx, placement["place"], replace(unit, period=p.decide.period), price)
    base = baselines(one, devices, unit, p.tp_link)
    best_single = max((v for k, v in base.items() if k.endswith(" alone")),
                      key=lambda r: r["throughput"])
    speedups = {k: planned["throughput"] / v["throughput"] for k, v in base.items()}
    speedups["best single device"] = planned["throughput"] / best_single["throughput"]
    report = {"policy": placement["policy"], "devices": [d.key for d in devices],
              "target": target.describe(), "layers": unit.layers, "tokens": unit.tokens,
              "unit": unit.label, "forwards_per_request": unit.forwards_per_request,
              "kernels": len(one.graph.kernels), "period": p.decide.period,
              "planned": planned,
              "solve_s": placement["solve_s"],
              "solver": {k: placement.get(k) for k in ("solver_status", "gap", "bound_s")},
              "baselines": base, "speedup_over": speedups,
              "fig2": profile["fig2"],
              "kernel_times": {k: profile.get(k) for k in ("backend", "measured", "sources",
                                                           "warnings", "band")},
              "check": json.loads((inputs["reinsert"] / "reinsert.json").read_text())}
    band = profile.get("band") or {}
    if p.robust_samples and band:
        report["robust"] = {"samples": p.robust_samples, "holds": robust.survival(
            one, ctx, placement["place"], devices, replace(unit, period=p.decide.period), band,
            p.robust_samples, evaluate, lambda c, d, u: baselines(c, d, u, p.tp_link))}
    if "prefill.decide" in inputs:
        report["serving"] = serving(inputs, p, ctx, placement, unit)
    report["summary"] = summary(report)
    report["sweep_columns"] = {
        unit.label: f"{planned['throughput']:.4g}",
        "Perf/$": f"{planned['perf_per_dollar']:.4g}",
        **{f"x {k}": f"{v:.2f}" for k, v in speedups.items() if not k.endswith(" alone")},
        "solve s": f"{placement['solve_s']:.3g}",
        **serving_columns(report.get("serving", {}))}
    report["headline"] = {"label": unit.label, "value": planned["throughput"],
                          "reference": best_single["throughput"],
                          "reference_label": "best single device"}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "report.md").write_text(markdown(report, placement))


def serving(inputs: Inputs, p: Params, ctx: Any, placement: dict[str, Any],
            unit: Unit) -> dict[str, Any]:
    """Prefill + ``output_len`` decode steps per request: the planned placements of both
    phases against each device alone, request distribution, PD and AF disaggregation (and
    AF with TP attention on twins, ``pimbuild.targets.gpus.tp``), in the cost model's closed forms
    (``pimbuild.targets.gpus.workload``) and in the discrete-event serving simulation
    (``pimbuild.targets.gpus.serving``)."""
    pre_inputs = inputs.phase("prefill")
    pre_ctx = decide.context(pre_inputs, p.decide)
    pre_data = per_period(json.loads((pre_inputs["extract"] / "kernels.json").read_text()),
                          p.decide.period)
    dec_data = per_period(json.loads((inputs["extract"] / "kernels.json").read_text()),
                          p.decide.period)
    pre_place = json.loads((pre_inputs["decide"] / "placement.json").read_text())["place"]
    devices = list(p.decide.profile.target.devices)
    w = workload.Workload(output_len=p.serve.output_len, batch=unit.tokens)
    pre_tp, dec_tp = tp.ways(pre_ctx, devices, p.tp_link), tp.ways(ctx, devices, p.tp_link)
    pre = workload.phase(pre_ctx, pre_place, pre_data.get("layers", 1),
                         workload.af_ways(pre_ctx, devices), pre_tp)
    dec = workload.phase(ctx, placement["place"], dec_data["layers"],
                         workload.af_ways(ctx, devices), dec_tp)
    rows = workload.compare(w, pre, dec, [d.key for d in devices],
                            [d.price_per_hour for d in devices], ctx.link)
    planned = rows["planned"]["tokens_per_s"]
    out = {"output_len": w.output_len, "batch": w.batch, "rows": rows,
           "prefill_s": pre.planned, "decode_step_s": dec.planned,
           "speedup_over": {k: planned / v["tokens_per_s"] for k, v in rows.items()
                            if k != "planned"}}
    return out | {"simulated": simulated(p, (pre_ctx, pre_place, pre_data),
                                         (ctx, placement["place"], dec_data), devices,
                                         workload.ranked(w, pre, dec, ctx.link),
                                         list(zip(pre_tp, dec_tp, strict=True)))}


def per_period(data: dict[str, Any], period: int) -> dict[str, Any]:
    """A phase's ``kernels.json`` content as the serving models read it when its placed graph
    is ``period`` layers: ``layers`` counts the periods, ``period`` the layers in each."""
    return {**data, "layers": data.get("layers", 1) // period, "period": period}


def simulated(p: Params, pre: tuple, dec: tuple, devices: list[Any],
              order: tuple[list[int], list[int]], tp_ways: list[tuple[Any, Any]] = ()
              ) -> dict[str, Any]:
    """Every system serving the same requests in the discrete-event simulation: PD's and
    AF's best ``serve.splits`` splits by the closed forms (``order``), and AF with TP
    attention on each group of twins (``tp_ways``: ``tp.ways``' prefill and decode ways)."""
    import time

    s = p.serve
    try:
        systems = des.systems(pre, dec, devices, p.decide.policy, monitor=s.monitor,
                                  order=order, limit=s.splits, tp_ways=tp_ways)
    except RuntimeError as e:  # HiGHS stopped on the monitor's other placement
        raise StageError(NAME, f"the online monitor's alternative placement: {e} "
                               f"(gpus.time_limit_s={p.decide.time_limit_s}; raise it, keep "
                               f"the best placement found: gpus.on_time_limit=best, or "
                               f"serve.monitor=false)") from None
    kv = des.kv_map(pre[2], dec[2])
    requests = des.requests(s, pre[2].get("prompt", 0))
    link = pre[0].link
    monitor = des.Monitor(s.window_s, s.beta, s.stall_s) if s.monitor else None
    out = {}
    for name, system in systems.items():
        began = time.perf_counter()
        summary = des.run(system, requests, kv, link, dec[2].get("tokens", 1), s.depth,
                              monitor)
        wall = time.perf_counter() - began
        out[name] = summary | {"wall_s": wall, "perf_per_dollar": summary["tokens_per_s"]
                               / system.price_per_hour,
                               "simulated_per_wall": summary["simulated_s"] / wall}
    # the highest rate within the SLO: the planned system, the better PD and AF
    best = {"planned": "planned"}
    for kind in ("PD", "AF"):
        ways = [k for k in out if k.startswith(kind)]
        if ways:
            best[kind] = max(ways, key=lambda k: out[k]["tokens_per_s"])
    slo = {kind: {"system": name, "max_rate_per_s": des.max_rate(
        systems[name], pre[2].get("prompt", 0), s.output_len, s.slo_s_per_token, kv, link,
        dec[2].get("tokens", 1), s.depth, monitor, n=min(s.requests, 50), steps=6,
        seed=s.seed)}
        for kind, name in best.items()}
    return {"arrivals": s.arrivals, "rate": s.rate, "requests": len(requests),
            "depth": s.depth, "monitor": s.monitor, "systems": out,
            "slo_s_per_token": s.slo_s_per_token, "max_rate": slo}


def serving_columns(served: dict[str, Any]) -> dict[str, str]:
    """The serving simulation's numbers for a sweep's combined table (W / beta sweeps)."""
    sim = served.get("simulated")
    if not sim:
        return {}
    pl = sim["systems"]["planned"]
    return {"served tokens/s": f"{pl['tokens_per_s']:.4g}",
            "ms/token": f"{pl['mean_normalized_latency_s'] * 1e3:.3g}",
            "TTFT P99 ms": f"{pl['p99_ttft_s'] * 1e3:.3g}",
            "TPOT P99 ms": f"{pl['p99_tpot_s'] * 1e3:.3g}", "switches": str(pl["switches"]),
            "max rate /s": f"{sim['max_rate']['planned']['max_rate_per_s']:.3g}"}


def ahead_note(speedup_over: dict[str, float], planned: str) -> list[str]:
    """A line naming the baselines that beat ``planned`` (speedup below 1), if any."""
    ahead = {k: v for k, v in speedup_over.items() if v < 1}
    if not ahead:
        return []
    return ["[yellow]note[/]: in this cost model " + ", ".join(
        f"{k} ({1 / v:.2f}x)" for k, v in ahead.items())
        + (" gives" if len(ahead) == 1 else " give") + f" more throughput than {planned}"]


def period_note(r: dict[str, Any]) -> str:
    period = r.get("period", 1)
    return "" if period == 1 else \
        f" (placed {period} at a time: {r['layers'] // period} period(s), gpus.period)"


def summary(r: dict[str, Any]) -> list[str]:
    pl, f2 = r["planned"], r["fig2"]
    over = ", ".join(f"{k} {v:.2f}x" for k, v in r["speedup_over"].items())
    lines = [f"[bold]{pl['throughput']:.4g} {r['unit']}[/] with policy {r['policy']} on "
             f"{' + '.join(r['devices'])} ({r['target']['link']}): cycle "
             f"{pl['cycle_s'] * 1e6:.4g} us x {r['layers']} layer(s){period_note(r)}, "
             f"forward latency "
             f"{pl['latency_s'] * 1e3:.4g} ms, {pl['transfer_bytes']} B moved per layer, "
             f"kernels per device {pl['on_device']}",
             f"speedup over: {over}; Perf/$ {pl['perf_per_dollar']:.4g} {r['unit']} per $/h; "
             f"with transfers fully overlapped (the paper's assumption) "
             f"{pl['throughput_overlapped']:.4g} {r['unit']}",
             f"partitioned program on {r['check']['processes']} processes "
             f"{outcome(r['check'])}; {r['check']['transfers']} transfers"
             + (f", {r['check']['placements']} distinct layer placements"
                if r['check'].get('placements', 1) > 1 else "")]
    lines += ahead_note(r["speedup_over"], "the planned placement")
    if r.get("robust"):
        lines += robust.note(r["speedup_over"], r["robust"]["holds"], r["robust"]["samples"])
    if r["speedup_over"].get("layer pipeline", 1) < 1 and r.get("period", 1) < r["layers"]:
        lines.append(f"  gpus.period={r['layers']} plans the {r['layers']} layers as one graph, "
                     f"which contains the layer pipeline's split (a divisor plans fewer)"
                     + ("; on three or more devices its MILP rarely proves the optimum in "
                        "time: add gpus.on_time_limit=best" if len(r["devices"]) > 2 else ""))
    served = r.get("serving", {})
    if "rows" in served:
        over = ", ".join(f"{k} {v:.2f}x" for k, v in served["speedup_over"].items())
        lines.append(f"serving prefill + {served['output_len']} output tokens in batches of "
                     f"{served['batch']}: {served['rows']['planned']['tokens_per_s']:.4g} "
                     f"tokens/s; speedup over: {over}")
        lines += ahead_note(served["speedup_over"], "the planned placements when serving")
        sim = served.get("simulated")
        if sim:
            pl = sim["systems"]["planned"]
            rates = ", ".join(f"{k} {m['max_rate_per_s']:.3g}/s"
                              for k, m in sim["max_rate"].items())
            lines.append(f"serving simulation ({sim['requests']} requests, {sim['arrivals']}): "
                         f"{pl['tokens_per_s']:.4g} tokens/s, TTFT P99 "
                         f"{pl['p99_ttft_s'] * 1e3:.3g} ms, TPOT P99 "
                         f"{pl['p99_tpot_s'] * 1e3:.3g} ms, {pl['switches']} monitor switch(es);"
                         f" highest rate within {sim['slo_s_per_token'] * 1e3:g} ms/token: "
                         f"{rates}")
    solver = r.get("solver", {})
    if solver.get("solver_status") not in (None, "Optimal"):
        lines.append(f"[yellow]placement not proven optimal[/]: HiGHS stopped with "
                     f"{solver['solver_status']}, within {solver['gap']:.2%} of its bound "
                     f"(gpus.on_time_limit=best)")
    if f2:
        lines.append(f"{f2['faster_on_second']}/{f2['kernels']} kernels "
                     f"({f2['share_by_count']:.0%} by count, {f2['share_by_time']:.0%} by time) "
                     f"run faster on {r['devices'][f2.get('second', 1)]} than on "
                     f"{r['devices'][0]}")
    return lines + kernel_times_lines(r.get("kernel_times") or {})


def kernel_times_lines(kt: dict[str, Any]) -> list[str]:
    """Where the kernel times came from: measured (how many, what share of the time) or
    predicted (with the fitted model's held-out error)."""
    backend = kt.get("backend")
    band = ", ".join(f"{f} {v['median']:.0%}" for f, v in (kt.get("band") or {}).items())
    predicted = f"the fitted model (held-out median error: {band})" if band \
        else "the fitted model"
    if backend == "roofline":
        return ["kernel times: the spec roofline (assumed efficiencies, not measured)"]
    if backend == "fitted":
        return [f"kernel times: predicted by {predicted}"]
    if backend == "cuda":
        return [f"kernel times: measured on this GPU for {', '.join(kt.get('measured') or [])}"
                f"; the other devices' from the spec roofline"]
    parts = [f"{d} {v['measured']}/{v['measured'] + v['predicted']} measured "
             f"({v['measured_time_share']:.0%} of its time)" if v["table"]
             else f"{d} no table" for d, v in (kt.get("sources") or {}).items()]
    return [f"kernel times: {'; '.join(parts)}; the rest predicted by {predicted}",
            *(f"[yellow]warning[/]: {w}" for w in kt.get("warnings") or [])]


def serving_markdown(served: dict[str, Any]) -> list[str]:
    if "rows" not in served:
        return []
    lines = ["", f"## Serving: prefill + {served['output_len']} output tokens per request, "
                 f"decode in batches of {served['batch']} (cost model)", "",
             "| placement | tokens/s | Perf/$ | speedup of planned |", "|---|---:|---:|---:|"]
    for name, v in served["rows"].items():
        over = served["speedup_over"].get(name)
        note = {"PD disaggregation": f" (prefill on {v.get('prefill_on')}, decode on "
                                     f"{v.get('decode_on')}, bound by {v.get('bottleneck')})",
                "AF disaggregation": f" (attention on {v.get('attention_on')})"}.get(name, "")
        lines.append(f"| {name}{note} | {v['tokens_per_s']:.4g} | {v['perf_per_dollar']:.4g} "
                     f"| {f'{over:.2f}x' if over else ''} |")
    sim = served.get("simulated")
    if not sim:
        return lines
    lines += ["", f"## Serving simulation: {sim['requests']} requests, arrivals "
                  f"{sim['arrivals']} (rate {sim['rate']}/s), depth {sim['depth']}, monitor "
                  f"{'on' if sim['monitor'] else 'off'}", "",
              "| system | tokens/s | Perf/$ | norm. latency ms (mean / P99) | TTFT ms P50 / P99 "
              "| TPOT ms P50 / P99 | decode batch (mean) | bottleneck compute / comm wait / "
              "idle | switches | simulated s / wall s |",
              "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for name, v in sim["systems"].items():
        lines.append(
            f"| {name} | {v['tokens_per_s']:.4g} | {v['perf_per_dollar']:.4g} | "
            f"{v['mean_normalized_latency_s'] * 1e3:.3g} / "
            f"{v['p99_normalized_latency_s'] * 1e3:.3g} | {v['p50_ttft_s'] * 1e3:.3g} / "
            f"{v['p99_ttft_s'] * 1e3:.3g} | {v['p50_tpot_s'] * 1e3:.3g} / "
            f"{v['p99_tpot_s'] * 1e3:.3g} | {v['mean_decode_batch']:.3g} | "
            f"{v['bottleneck_compute_share']:.0%} / "
            f"{v['bottleneck_comm_wait_share']:.0%} / {v['bottleneck_idle_share']:.0%} | "
            f"{v['switches']} | {v['simulated_per_wall']:.3g} |")
    lines += ["", f"Highest Poisson rate with mean normalized latency within "
                  f"{sim['slo_s_per_token'] * 1e3:g} ms/token: " + ", ".join(
                      f"{m['system']} {m['max_rate_per_s']:.3g} requests/s"
                      for m in sim["max_rate"].values())]
    return lines


def solver_note(r: dict[str, Any]) -> str:
    solver = r.get("solver", {})
    if solver.get("solver_status") in (None, "Optimal"):
        return ""
    return f" (stopped with {solver['solver_status']}, {solver['gap']:.2%} from the bound)"


def markdown(r: dict[str, Any], placement: dict[str, Any]) -> str:
    rows = [("planned: " + r["policy"], r["planned"]), *r["baselines"].items()]
    lines = [f"# pimbuild report: policy `{r['policy']}` on {' + '.join(r['devices'])}", "",
             f"Model: {r['kernels']} kernels per layer, {r['layers']} identical layer(s), "
             f"{r['tokens']} output token(s) or request(s) per forward, "
             f"{r['forwards_per_request']} forward(s) per request{period_note(r)}; link "
             f"{r['target']['link']} "
             f"({r['target']['link_gbps']} Gbps, {r['target']['link_latency_us']} us); "
             f"precision {r['target']['precision']}. Solve time {r['solve_s']:.3g} s"
             f"{solver_note(r)}.", "",
             f"| placement | {r['unit']} | Perf/$ ({r['unit']} per $/h) | cycle us | latency ms "
             f"| {r['unit']}, transfers overlapped |", "|---|---:|---:|---:|---:|---:|"]
    for name, v in rows:
        if "attention_on" in v:
            name += f" (attention on {v['attention_on']})"
        if "layers_on" in v:
            name += " (" + " + ".join(f"{n} layers on {k}" for k, n in v["layers_on"].items()) + ")"
        cyc = f"{v['cycle_s'] * 1e6:.4g}" if "cycle_s" in v else ""
        lat = f"{v['latency_s'] * 1e3:.4g}" if "latency_s" in v else ""
        ovl = f"{v['throughput_overlapped']:.4g}" if "throughput_overlapped" in v else ""
        lines.append(f"| {name} | {v['throughput']:.4g} | {v['perf_per_dollar']:.4g} | "
                     f"{cyc} | {lat} | {ovl} |")
    plain = [line.replace("[yellow]", "").replace("[/]", "") for line in
             kernel_times_lines(r.get("kernel_times") or {})
             + robust.note(r["speedup_over"], (r.get("robust") or {}).get("holds", {}),
                           (r.get("robust") or {}).get("samples", 0))]
    lines += ["", "## Kernel times", "", *(f"- {line}" for line in plain)]
    lines += serving_markdown(r.get("serving", {}))
    keys = placement["devices"]
    sources = (r.get("kernel_times") or {}).get("sources") or {}
    measured = {key: set(v.get("measured_ids", ())) for key, v in sources.items()}
    if measured:
        lines += ["", "A time marked `m` was measured (a kernel-time table); the others are "
                      "predicted."]
    layer = r.get("period", 1) > 1  # which of the placed layers a kernel belongs to
    lines += ["", "## Placement", "",
              "| id | " + ("layer | " if layer else "") + "kernel | kind | device | "
              + " | ".join(f"t {k} us" for k in keys) + " |",
              "|---:|" + ("---:|" if layer else "") + "---|---|---|" + "---:|" * len(keys)]
    for k in placement["kernels"]:
        lines.append(f"| {k['id']} | " + (f"{k['layer']} | " if layer else "")
                     + f"{k['name']} | {k['kind']} | {k['device']} | "
                     + " | ".join(f"{k[f't_{key}_s'] * 1e6:.3g}"
                                  + (" m" if k["id"] % r["kernels"] in measured.get(key, ())
                                     else "") for key in keys) + " |")
    return "\n".join(lines) + "\n"
