"""Stage ``simulate`` of the GPU target: what the placement buys, in the cost model
(``pimbuild.targets.gpus.costmodel.cost``), against the baselines FluidGPU compares with.

For the planned placement and every baseline: the cycle time of pipelined requests (the
throughput the MILP optimises), one forward's critical path, the throughput (output tokens/s =
``tokens / (layers x cycle time)``; for a model whose requests are ``forwards_per_request``
forwards, such as a diffusion model's denoising steps, requests/min), and Perf/$ = throughput
per USD-hour of the devices it rents. Baselines: each device alone; request distribution
(every device a full replica, throughputs added); AF disaggregation (attention kernels on
one device, the rest on the other, the better way round) where the model has attention and
other kernels. A model with a prefill phase (``model.phases.prefill``; the stage's
``PHASE_READS``) is also served: prefill + ``serve.output_len`` decode steps per request, in
the closed forms of ``pimbuild.targets.gpus.systems.closedform`` (PD disaggregation among the
baselines) and in the discrete-event simulation of ``pimbuild.targets.gpus.systems.serving``
(every baseline, the online monitor, the highest rate within the SLO). Writes ``report.json``
and ``report.md``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pimbuild.core.errors import ConfigError, StageError
from pimbuild.core.stage import Inputs
from pimbuild.core.trace import OPEN_WITH, Trace
from pimbuild.targets.gpus import decide
from pimbuild.targets.gpus.costmodel import robust
from pimbuild.targets.gpus.costmodel.cost import Link
from pimbuild.targets.gpus.report import markdown, serving_columns, summary
from pimbuild.targets.gpus.systems import closedform, serving_systems, timeline, tp
from pimbuild.targets.gpus.systems import serving as des  # the discrete-event simulation
from pimbuild.targets.gpus.systems.arrivals import ARRIVALS
from pimbuild.targets.gpus.systems.baselines import Unit, baselines, evaluate
from pimbuild.targets.gpus.target import GpuTarget

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
    decide: decide.Params  # to rebuild the planner contexts of the placements it reads
    target: GpuTarget  # the devices, their link and the target's factors
    serve: Serve
    tp_link: Link  # joins the twins of AF's tensor-parallel attention group
    # draws of the kernel-time model's error (pimbuild.targets.gpus.costmodel.robust)
    robust_samples: int = 0
    timeline: bool = False  # also write timeline.json (timeline=true)


def params(cfg: DictConfig) -> Params:
    decided = decide.params(cfg)
    return Params(decide=decided, target=decided.profile.target, serve=serve_params(cfg),
                  tp_link=Link(cfg.tp_link.gbps, cfg.tp_link.latency_us),
                  robust_samples=cfg.gpus.robust_samples, timeline=cfg.timeline)


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


def run(inputs: Inputs, p: Params, out: Path) -> None:
    one = decide.layer_context(inputs, p.decide)
    ctx = decide.context(inputs, p.decide, one)
    data = json.loads((inputs["extract"] / "kernels.json").read_text())
    placement = json.loads((inputs["decide"] / "placement.json").read_text())
    profile = json.loads((inputs["profile"] / "profile.json").read_text())
    target = p.target
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
    report = {"planner": placement["planner"], "devices": [d.key for d in devices],
              "target": target.describe(), "layers": unit.layers, "tokens": unit.tokens,
              "unit": unit.label, "forwards_per_request": unit.forwards_per_request,
              "kernels": len(one.graph.kernels), "period": p.decide.period,
              "planned": planned,
              "solve_s": placement["solve_s"],
              "solver": {k: placement.get(k) for k in ("solver_status", "gap", "bound_s")},
              "baselines": base, "speedup_over": speedups,
              "fig2": profile["fig2"],
              "kernel_times": {k: profile.get(k) for k in ("backend", "measured", "sources",
                                                           "warnings", "band", "precision")},
              "check": json.loads((inputs["reinsert"] / "reinsert.json").read_text())}
    band = profile.get("band") or {}
    if p.robust_samples and band:
        report["robust"] = {"samples": p.robust_samples, "holds": robust.survival(
            one, ctx, placement["place"], devices, replace(unit, period=p.decide.period), band,
            p.robust_samples, evaluate, lambda c, d, u: baselines(c, d, u, p.tp_link))}
    drawn = None
    if "prefill.decide" in inputs:
        report["serving"], drawn = serving(inputs, p, ctx, placement, unit)
    elif p.timeline:
        drawn = timeline.forwards(ctx.graph, placement["place"], ctx.times, ctx.link,
                                  [d.key for d in devices], ctx.period, p.serve.depth)
    if drawn is not None:
        report["timeline"] = {"file": "timeline.json", "open_with": OPEN_WITH,
                              "events": drawn.write(out / "timeline.json",
                                                    planner=placement["planner"])}
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
            unit: Unit) -> tuple[dict[str, Any], Trace | None]:
    """Prefill + ``output_len`` decode steps per request: the planned placements of both
    phases against each device alone, request distribution, PD and AF disaggregation (and
    AF with TP attention on twins, ``pimbuild.targets.gpus.systems.tp``), in the cost model's
    closed forms (``pimbuild.targets.gpus.systems.closedform``) and in the discrete-event
    serving simulation (``pimbuild.targets.gpus.systems.serving``)."""
    pre_inputs = inputs.phase("prefill")
    pre_ctx = decide.context(pre_inputs, p.decide)
    pre_data = per_period(json.loads((pre_inputs["extract"] / "kernels.json").read_text()),
                          p.decide.period)
    dec_data = per_period(json.loads((inputs["extract"] / "kernels.json").read_text()),
                          p.decide.period)
    pre_place = json.loads((pre_inputs["decide"] / "placement.json").read_text())["place"]
    devices = list(p.target.devices)
    w = closedform.Workload(output_len=p.serve.output_len, batch=unit.tokens)
    pre_tp, dec_tp = tp.ways(pre_ctx, devices, p.tp_link), tp.ways(ctx, devices, p.tp_link)
    pre = closedform.phase(pre_ctx, pre_place, pre_data.get("layers", 1),
                         closedform.af_ways(pre_ctx, devices), pre_tp)
    dec = closedform.phase(ctx, placement["place"], dec_data["layers"],
                         closedform.af_ways(ctx, devices), dec_tp)
    rows = closedform.compare(w, pre, dec, [d.key for d in devices],
                            [d.price_per_hour for d in devices], ctx.link)
    planned = rows["planned"]["tokens_per_s"]
    out = {"output_len": w.output_len, "batch": w.batch, "rows": rows,
           "prefill_s": pre.planned, "decode_step_s": dec.planned,
           "speedup_over": {k: planned / v["tokens_per_s"] for k, v in rows.items()
                            if k != "planned"}}
    sim, drawn = simulated(p, (pre_ctx, pre_place, pre_data), (ctx, placement["place"], dec_data),
                           devices, closedform.ranked(w, pre, dec, ctx.link),
                           list(zip(pre_tp, dec_tp, strict=True)))
    return out | {"simulated": sim}, drawn


def per_period(data: dict[str, Any], period: int) -> dict[str, Any]:
    """A phase's ``kernels.json`` content as the serving models read it when its placed graph
    is ``period`` layers: ``layers`` counts the periods, ``period`` the layers in each."""
    return {**data, "layers": data.get("layers", 1) // period, "period": period}


def simulated(p: Params, pre: tuple, dec: tuple, devices: list[Any],
              order: tuple[list[int], list[int]], tp_ways: list[tuple[Any, Any]] = ()
              ) -> tuple[dict[str, Any], Trace | None]:
    """Every system serving the same requests in the discrete-event simulation: PD's and
    AF's best ``serve.splits`` splits by the closed forms (``order``), and AF with TP
    attention on each group of twins (``tp_ways``: ``tp.ways``' prefill and decode ways)."""
    import time

    s = p.serve
    try:
        systems = serving_systems.systems(pre, dec, devices, p.decide.planner, monitor=s.monitor,
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
    drawn = timeline.served(systems["planned"], requests, kv, link, dec[2].get("tokens", 1),
                            s.depth, monitor, [d.key for d in devices]) if p.timeline else None
    return {"arrivals": s.arrivals, "rate": s.rate, "requests": len(requests),
            "depth": s.depth, "monitor": s.monitor, "systems": out,
            "slo_s_per_token": s.slo_s_per_token, "max_rate": slo}, drawn
