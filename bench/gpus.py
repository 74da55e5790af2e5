"""The heterogeneous-GPU target's numbers (not a test; minutes): FluidGPU's Fig. 2 view, the
throughput and Perf/$ of the planners against every baseline on three GPU pairs, the
prefill + decode workload with PD disaggregation, MILP solve time against size (two devices
with the layers counted and per kernel; three per kernel), periodic placement, and the same
baselines on the paper's Fig. 9 cluster of 2 A100 + 1 L40S.

    .venv/bin/python bench/gpus.py            # everything but the functional check
    .venv/bin/python bench/gpus.py --check    # also run every model's partitioned program

Everything is in pimbuild's cost model (roofline kernel times from spec sheets, docs/design.md
§10): no GPU is used. Writes outputs/bench/gpus.{json,md} and three plots beside them.
"""

from __future__ import annotations

import argparse
import csv
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from hydra import compose, initialize_config_module

sys.path.insert(0, str(Path(__file__).parent))
from common import quiet_build  # noqa: E402

from pimbuild.build.config import register_configs  # noqa: E402
from pimbuild.commands.cli import CONFIG_MODULE  # noqa: E402
from pimbuild.core.console import console  # noqa: E402
from pimbuild.targets.gpus.costmodel import cost, ddg  # noqa: E402
from pimbuild.targets.gpus.planners import PlanContext, place, throughput, unrolled  # noqa: E402
from pimbuild.targets.gpus.systems import baselines, closedform
from pimbuild.targets.gpus.target import GpuTarget  # noqa: E402

MODELS = ["llama3_8b", "llama3_8b_prefill", "llama7b", "gptj6b", "mamba", "mmdit"]
PAIRS = [("a100", "l40s"), ("h100", "rtxpro6000"), ("b200", "h100")]
ORDINAL = ("1st", "2nd")
PAPER = {"over PD": 1.5, "over AF": 1.35, "Perf/$ over PD": 1.5, "Perf/$ over AF": 1.4}
CLUSTER = ("a100", "a100", "l40s")  # the paper's Fig. 9 cluster (2 A100 + 1 L40S)
PAPER_CLUSTER = {"over PD": 1.5, "over AF": 1.4}  # Fig. 9, both clusters


EXTRA: list[str] = []  # --set: more overrides for every build


def overrides(model: str, pair: tuple[str, ...], policy: str = "throughput") -> list[str]:
    return ["system=gpus", f"model={model}", f"devices=[{','.join(pair)}]",
            f"gpus.planner={policy}", *EXTRA]


def loaded(model: str, pair: tuple[str, ...], store: Path, run: Path, target_stage: str,
           policy: str = "throughput", extra: tuple[str, ...] = ()):
    """Build up to ``target_stage``; the target, the graph, kernel times and placement."""
    over = [*overrides(model, pair, policy), f"store={store}", f"stages=[{target_stage}]",
            *extra]
    result, _ = quiet_build(over, run)
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        target = GpuTarget.from_config(compose("config", overrides=over))
    stages = {s: Path(v["dir"]) for s, v in result.manifest["stages"].items()}
    data = json.loads((stages["extract"] / "kernels.json").read_text())
    graph = ddg.build(data, data["layers"], target.float_scale)
    with (stages["profile"] / "kernel_times.csv").open() as f:
        rows = list(csv.DictReader(f))
    times = [[float(r[f"t_{d.key}_s"]) for d in target.devices] for r in rows]
    placement = json.loads((stages["decide"] / "placement.json").read_text()) \
        if "decide" in stages else None
    ctx = PlanContext(graph, times, target.link, len(target.devices), target.comm_on_device)
    return target, data, ctx, placement, stages


def unit_of(data: dict) -> baselines.Unit:
    return baselines.Unit(data["layers"], data["tokens"], data["unit"],
                         data["forwards_per_request"])


def period_evaluate(one: PlanContext, placement: dict, unit: baselines.Unit, price: float
                    ) -> dict:
    """A placement of ``placement["period"]`` layers (``--set gpus.period=...``) evaluated
    on one layer's graph unrolled as decide placed it."""
    period = placement.get("period", 1)
    return baselines.evaluate(unrolled(one, period), placement["place"],
                             replace(unit, period=period), price)


def pairs_table(store: Path, tmp: Path) -> list[dict]:
    rows = []
    for pair in PAIRS:
        for model in MODELS:
            for policy in ("throughput", "latency"):
                target, data, ctx, placement, _ = loaded(model, pair, store,
                                                         tmp / f"{model}-{policy}", "decide",
                                                         policy)
                unit = unit_of(data)
                price = sum(d.price_per_hour for d in target.devices)
                planned = period_evaluate(ctx, placement, unit, price)
                base = baselines.baselines(ctx, list(target.devices), unit)
                t = ctx.times
                faster = [k for k, row in enumerate(t) if row[1] < row[0]]
                rows.append({"pair": "+".join(pair), "model": model, "policy": policy,
                             "unit": unit.label, "planned": planned, "baselines": base,
                             "solve_s": placement["solve_s"], "kernels": len(t),
                             "fig2_count": len(faster) / len(t),
                             "fig2_time": sum(t[k][0] for k in faster) / sum(r[0] for r in t),
                             "ratios": sorted(row[1] / row[0] for row in t)})
                console.print(f"{pair} {model} {policy}: {planned['throughput']:.4g} "
                              f"{unit.label}")
    return rows


PERIODS = (1, 2, 4, 8)  # and each model's number of layers


def periods_table(store: Path, tmp: Path) -> list[dict]:
    """The throughput planner over ``gpus.period`` layers at a time (the model as one graph
    of that many layers, the placement repeated) against the layer pipeline and request
    distribution, with the MILP's solve time, on every pair and model with layers."""
    rows = []
    for pair in PAIRS:
        for model in MODELS:
            target, data, one, _, _ = loaded(model, pair, store, tmp / f"period-{model}",
                                             "profile")
            unit = unit_of(data)
            if unit.layers < 2:
                continue
            price = sum(d.price_per_hour for d in target.devices)
            base = baselines.baselines(one, list(target.devices), unit)
            for period in sorted({p for p in (*PERIODS, unit.layers) if unit.layers % p == 0}):
                ctx = replace(unrolled(one, period), time_limit_s=30.0, incumbent=True)
                began = time.perf_counter()
                plan = place("throughput", ctx)
                seconds = time.perf_counter() - began
                r = baselines.evaluate(ctx, plan.place, replace(unit, period=period), price)
                rows.append({"pair": "+".join(pair), "model": model, "layers": unit.layers,
                             "period": period, "kernels": len(ctx.graph.kernels),
                             "throughput": r["throughput"], "unit": unit.label,
                             "x_pp": r["throughput"] / base["layer pipeline"]["throughput"],
                             "x_rd": r["throughput"]
                             / base["request distribution"]["throughput"],
                             "seconds": seconds, "status": plan.info["solver_status"],
                             "proven_gap": plan.info["gap"],
                             "formulation": "aggregated" if "formulation" in plan.info
                             else "per kernel"})
                console.print(rows[-1])
    return rows


def periods_markdown(periods: list[dict]) -> list[str]:
    if not periods:
        return []
    lines = ["", "## Periodic placement (`gpus.period`): throughput planner, layers planned "
                 "together", "",
             "Each cell: planned throughput over the layer pipeline's (x PP) and over request "
             "distribution's (x RD), and the MILP's seconds; a period equal to the model's "
             "layers plans the whole model.", "",
             "| pair | model | period | kernels | throughput | x PP | x RD | MILP | solve s | "
             "status |", "|---|---|---:|---:|---:|---:|---:|---|---:|---|"]
    for r in periods:
        status = r["status"] if r["status"] == "Optimal" else \
            f"{r['status']} ({r['proven_gap']:.2%} gap)"
        lines.append(f"| {r['pair']} | {r['model']} | {r['period']} of {r['layers']} | "
                     f"{r['kernels']} | {r['throughput']:.4g} {r['unit']} | {r['x_pp']:.2f} | "
                     f"{r['x_rd']:.2f} | {r.get('formulation', 'per kernel')} | "
                     f"{r['seconds']:.2f} | {status} |")
    return lines


def serving_table(store: Path, tmp: Path, w: closedform.Workload) -> list[dict]:
    """Llama-3-8B prefill + decode (its prefill phase): the simulate stage's serving rows,
    the throughput planner against PD, AF, RD and each device alone."""
    rows = []
    for pair in PAIRS:
        _, _, _, _, stages = loaded("llama3_8b", pair, store, tmp / "serve", "simulate")
        served = json.loads((stages["simulate"] / "report.json").read_text())["serving"]
        names = {"planned": "FluidGPU (throughput)",
                 **{f"{d} alone": f"{ORDINAL[i]} device alone" for i, d in enumerate(pair)}}
        result = {names.get(k, k): v for k, v in served["rows"].items()}
        pd = served["rows"]["PD disaggregation"]
        rows.append({"pair": "+".join(pair),
                     "tokens_per_s": {k: v["tokens_per_s"] for k, v in result.items()},
                     "perf_per_dollar": {k: v["perf_per_dollar"] for k, v in result.items()},
                     "pd_prefill_on": pd["prefill_on"], "pd_bottleneck": pd["bottleneck"],
                     "kv_bytes_per_request": pd["kv_bytes_per_request"]})
        console.print(f"{pair}: " + ", ".join(f"{k} {v:.4g}"
                                               for k, v in rows[-1]["tokens_per_s"].items()))
    return rows


def cluster_table(store: Path, tmp: Path, limit_s: float = 60.0) -> list[dict]:
    """FluidGPU's Fig. 9 cluster, 2 A100 + 1 L40S: the simulate stage's report for every
    model with one layer's placement reused (``gpus.period=1``) and with the whole model
    planned as one graph (the per-kernel MILP on three devices from the best whole-layer
    split, stopped at ``limit_s`` with the best placement found)."""
    rows = []
    for model in MODELS:
        layers, extra = None, ()
        while extra is not None:
            _, data, _, _, stages = loaded(model, CLUSTER, store, tmp / f"cluster-{model}",
                                           "simulate", extra=extra)
            r = json.loads((stages["simulate"] / "report.json").read_text())
            layers = data["layers"]
            rows.append({"model": model, "period": r["period"], "layers": layers,
                         "unit": r["unit"], "throughput": r["planned"]["throughput"],
                         "perf_per_dollar": r["planned"]["perf_per_dollar"],
                         "speedup_over": r["speedup_over"], "solver": r["solver"],
                         "solve_s": r["solve_s"],
                         "baselines": {k: {"throughput": v["throughput"],
                                           **{x: v[x] for x in ("attention_on", "layers_on")
                                              if x in v}}
                                       for k, v in r["baselines"].items()},
                         "serving": {k: r["serving"][k] for k in ("rows", "speedup_over")
                                     if k in r.get("serving", {})}})
            console.print(f"{model} period {r['period']}: {rows[-1]['throughput']:.4g} "
                          f"{r['unit']}, " + ", ".join(f"x {k} {v:.2f}" for k, v in
                                                       r["speedup_over"].items()))
            extra = (f"gpus.period={layers}", f"gpus.time_limit_s={limit_s}",
                     "gpus.on_time_limit=best") if not extra and layers > 1 else None
    return rows


def cluster_markdown(cluster: list[dict]) -> list[str]:
    if not cluster:
        return []
    lines = ["", f"## Fig. 9: {' + '.join(CLUSTER)}", "",
             "The throughput planner's placement against the baselines on the three devices "
             "(x: its throughput over theirs). AF: attention on one set of the devices, the "
             "rest on the other, a set of two taking alternate requests. PD (serving, "
             "Llama-3-8B prefill + decode): prefill on some devices, each other device an "
             "independent decode instance.", "",
             "| model | planned | throughput | x best single | x RD | x AF (attention on) | "
             "x PP (layers) | x PD serving | solve s (status) |",
             "|---|---|---:|---:|---:|---|---|---:|---|"]
    for r in cluster:
        over, base = r["speedup_over"], r["baselines"]
        af = base.get("AF disaggregation")
        pp = base.get("layer pipeline")
        pd = r["serving"].get("speedup_over", {}).get("PD disaggregation")
        status = r["solver"].get("solver_status") or ""
        if status and status != "Optimal":
            status += f", {r['solver']['gap']:.2%} gap"
        planned = "one layer reused" if r["period"] == 1 else f"{r['period']} layers"
        lines.append(
            f"| {r['model']} | {planned} | {r['throughput']:.4g} {r['unit']} | "
            f"{over['best single device']:.2f} | {over['request distribution']:.2f} | "
            + (f"{over['AF disaggregation']:.2f} ({af['attention_on']})" if af else "n/a")
            + " | " + (f"{over['layer pipeline']:.2f} ("
                       + ", ".join(f"{k} {v}" for k, v in pp["layers_on"].items()) + ")"
                       if pp else "n/a")
            + f" | {f'{pd:.2f}' if pd else ''} | {r['solve_s']:.3g} ({status}) |")
    lines += ["", f"Paper (Fig. 9, GPT-oss 20B on 2 A100 + 1 L40S and Qwen3 235B on 8 B200 + "
                  f"8 H100): {PAPER_CLUSTER['over PD']}x over PD and "
                  f"{PAPER_CLUSTER['over AF']}x over AF."]
    return lines


def solve_times(store: Path, tmp: Path) -> list[dict]:
    """Throughput MILP time against kernels (Llama-3-8B decode layers unrolled, one kernel
    per linalg op) and devices: on two devices with the layers aggregated (what ``decide``
    runs), per kernel, and per kernel with no two layers alike (``varied_solve_times``)."""
    rows = []
    for devices in (("a100", "l40s"), ("a100", "a100", "l40s")):
        _, _, base, _, _ = loaded("llama3_8b", devices, store, tmp / "solve", "profile",
                                  extra=("gpus.kernels=lowered",))  # 34 kernels a layer
        for layers in (1, 4, 8, 16, 30, 32):
            if len(devices) > 2 and layers > 16:
                continue  # hours: the per-kernel MILP on three devices
            ctx = unrolled(replace(base, time_limit_s=60.0, incumbent=True), layers)
            ways = [("aggregated", 0.0)] if len(devices) == 2 and layers > 1 else []
            ways += [("per kernel", 0.0), ("per kernel", 0.01)]
            for way, gap in ways:
                began = time.perf_counter()
                plan = (place("throughput", ctx) if way == "aggregated" else
                        throughput.per_kernel(replace(ctx, mip_gap=gap)))
                rows.append({"devices": "+".join(devices), "kernels": len(ctx.graph.kernels),
                             "layers": layers, "formulation": way, "gap": gap,
                             "seconds": time.perf_counter() - began,
                             "status": plan.info["solver_status"],
                             "proven_gap": plan.info["gap"], "cycle_us": plan.objective * 1e6})
                console.print(rows[-1])
        if len(devices) == 2:
            rows += varied_solve_times(replace(base, time_limit_s=60.0, incumbent=True),
                                       "+".join(devices))
    return rows


def varied_solve_times(one: PlanContext, devices: str, layers: int = 30,
                       seeds: tuple[int, ...] = (0, 1, 2)) -> list[dict]:
    """The per-kernel MILP on a DDG without repeated layers (the issue's 1,000-kernel case,
    which counting layers cannot shorten): ``layers`` copies of one layer, every kernel's
    time on every device scaled by its own lognormal factor (sigma 0.25, ``seed``)."""
    rows = []
    for seed in seeds:
        ctx = unrolled(one, layers)
        rng = random.Random(seed)
        ctx = replace(ctx, times=[[t * rng.lognormvariate(0, 0.25) for t in row]
                                  for row in ctx.times], layer=None, period=1)
        began = time.perf_counter()
        plan = throughput.per_kernel(ctx)
        rows.append({"devices": devices, "kernels": len(ctx.graph.kernels),
                     "formulation": f"per kernel, layers varied (seed {seed})", "gap": 0.0,
                     "seconds": time.perf_counter() - began,
                     "status": plan.info["solver_status"], "proven_gap": plan.info["gap"],
                     "cycle_us": plan.objective * 1e6})
        console.print(rows[-1])
    return rows


def pipelining(store: Path, tmp: Path, requests: int = 60) -> list[dict]:
    """FluidGPU's Fig. 10(a) in the serving simulator: Llama-3-8B decode steps on the first
    pair, without pipelining, pipelined, pipelined with priorities, against the cycle-time
    bound with transfers overlapped (the simulator overlaps them)."""
    from pimbuild.targets.gpus.systems.engine import Server

    target, data, ctx, placement, _ = loaded("llama3_8b", PAIRS[0], store, tmp / "pipe",
                                             "decide")
    bound = 1 / (data["layers"] * cost.cycle_time(ctx.graph, placement["place"], ctx.times,
                                                  ctx.link, ctx.n_dev, 0.0))
    rows = []
    for name, depth, priorities in (("no pipelining", 1, True), ("pipelining", 8, False),
                                    ("pipelining + priorities", 8, True)):
        began = time.perf_counter()
        result = Server(ctx.graph, placement["place"], ctx.times, ctx.link, ctx.n_dev,
                        layers=data["layers"], depth=depth, priorities=priorities
                        ).run([0.0] * requests)
        rate = requests / result.end
        rows.append({"mode": name, "forwards_per_s": rate, "share_of_bound": rate / bound,
                     "simulated_s": result.end, "wall_s": time.perf_counter() - began})
        console.print(rows[-1])
    return rows


def check_all(store: Path, tmp: Path) -> list[dict]:
    """Every model's partitioned program on two processes, checked against eager."""
    rows = []
    for model in MODELS:
        result, seconds = quiet_build([*overrides(model, PAIRS[0]), f"store={store}",
                                       "stages=[reinsert]"], tmp / f"check-{model}")
        r = json.loads((Path(result.manifest["stages"]["reinsert"]["dir"]) / "reinsert.json")
                       .read_text())
        rows.append({"model": model, "max_rel_error": r["max_rel_error"],
                     "transfers": r["transfers"], "build_s": seconds})
        console.print(rows[-1])
    return rows


def plots(rows: list[dict], serving: list[dict], out: Path) -> None:
    from pimbuild.core.plots import plt, save_figure

    if not rows or not serving:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, key in zip(axes, ("tokens_per_s", "perf_per_dollar"), strict=True):
        names = list(serving[0][key])
        for i, name in enumerate(names):
            ax.bar([j + i / (len(names) + 1) for j in range(len(serving))],
                   [r[key][name] for r in serving], width=1 / (len(names) + 1), label=name)
        ax.set_xticks(range(len(serving)), [r["pair"] for r in serving])
        ax.set_ylabel("output tokens/s" if key == "tokens_per_s" else "tokens/s per $/h")
    axes[0].legend(fontsize=7)
    fig.suptitle("Llama-3-8B, prefill 1,020 + decode 129 tokens, batch 16 (cost model)")
    save_figure(fig, out / "gpus_serving.png")
    pair_policy_plot(rows, out, plt, save_figure)
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        if r["policy"] == "throughput" and r["pair"] == "+".join(PAIRS[0]):
            ys = [(i + 1) / len(r["ratios"]) for i in range(len(r["ratios"]))]
            ax.step(r["ratios"], ys, where="post", label=r["model"])
    ax.axvline(1.0, color="k", lw=0.8)
    ax.set_xscale("log")
    ax.set_xlabel(f"kernel time on {PAIRS[0][1]} / on {PAIRS[0][0]}")
    ax.set_ylabel("share of kernels")
    ax.legend(fontsize=7)
    save_figure(fig, out / "gpus_preference_cdf.png")


def pair_policy_plot(rows: list[dict], out: Path, plt, save_figure) -> None:
    """Planned throughput per model, pair and policy, over the pair's best single device;
    the layer pipeline's as a black tick over each pair's throughput bar."""
    combos = list(dict.fromkeys((r["pair"], r["policy"]) for r in rows))
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, ax = plt.subplots(figsize=(11, 4.6))
    width = 1 / (len(combos) + 1)
    for i, (pair, policy) in enumerate(combos):
        ys, pp = [], []
        for m in models:
            r = next((r for r in rows if (r["model"], r["pair"], r["policy"]) ==
                      (m, pair, policy)), None)
            single = max(v["throughput"] for k, v in r["baselines"].items()
                         if k.endswith(" alone")) if r else 1.0
            ys.append(r["planned"]["throughput"] / single if r else 0.0)
            pipeline = r["baselines"].get("layer pipeline") if r else None
            pp.append(pipeline["throughput"] / single if pipeline else None)
        xs = [j + i * width for j in range(len(models))]
        ax.bar(xs, ys, width=width, label=f"{pair} {policy}")
        if policy == "throughput":
            ticks = [(x, y) for x, y in zip(xs, pp, strict=True) if y is not None]
            ax.scatter([x for x, _ in ticks], [y for _, y in ticks], marker="_", s=120,
                       color="k", label="layer pipeline" if i == 0 else None)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_xticks([j + width * (len(combos) - 1) / 2 for j in range(len(models))], models)
    ax.set_ylabel("throughput / best single device")
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.08))
    save_figure(fig, out / "gpus_pairs.png")


def markdown(rows, serving, solve, checks, w) -> str:
    lines = ["# bench/gpus.py", "", f"Overrides: {' '.join(EXTRA) or 'none'}.", "",
             "## Fig. 2 view and planned throughput per model and pair",
             "", "| pair | model | policy | throughput | unit | x best single | x RD | x AF | "
             "x PP | kernels faster on 2nd (count / time) | solve s |",
             "|---|---|---|---:|---|---:|---:|---:|---:|---|---:|"]
    for r in rows:
        base, pl = r["baselines"], r["planned"]["throughput"]
        single = max(v["throughput"] for k, v in base.items() if k.endswith(" alone"))
        af = base.get("AF disaggregation")
        x_af = f"{pl / af['throughput']:.2f}" if af else "n/a"
        pp = base.get("layer pipeline")
        x_pp = f"{pl / pp['throughput']:.2f}" if pp else "n/a"
        lines.append(f"| {r['pair']} | {r['model']} | {r['policy']} | {pl:.4g} | {r['unit']} | "
                     f"{pl / single:.2f} | {pl / base['request distribution']['throughput']:.2f}"
                     f" | {x_af} | {x_pp} | "
                     f"{r['fig2_count']:.0%} / {r['fig2_time']:.0%} | {r['solve_s']:.3g} |")
    lines += serving_markdown(serving, w) + solve_markdown(solve)
    if checks:
        lines += ["", "## Partitioned program on two processes vs eager", "",
                  "| model | max rel. error | transfers | build s |", "|---|---:|---:|---:|"]
        lines += [f"| {c['model']} | {c['max_rel_error']:.2g} | {c['transfers']} | "
                  f"{c['build_s']:.1f} |" for c in checks]
    return "\n".join(lines) + "\n"


def serving_markdown(serving: list[dict], w: closedform.Workload) -> list[str]:
    if not serving:
        return []
    lines = ["", f"## Llama-3-8B serving: {w.input_len} input, {w.output_len} output tokens, "
              f"batch {w.batch}", ""]
    names = list(serving[0]["tokens_per_s"])
    lines += ["| pair | " + " | ".join(names) + " | PD prefill on, bottleneck |",
              "|---|" + "---:|" * len(names) + "---|"]
    for r in serving:
        lines.append(f"| {r['pair']} tokens/s | " + " | ".join(
            f"{r['tokens_per_s'][n]:.4g}" for n in names)
            + f" | {r['pd_prefill_on']}, {r['pd_bottleneck']} |")
        lines.append(f"| {r['pair']} Perf/$ | " + " | ".join(
            f"{r['perf_per_dollar'][n]:.4g}" for n in names) + " | |")
    over = {k: statistics.mean(r["tokens_per_s"]["FluidGPU (throughput)"]
                               / r["tokens_per_s"][f"{k} disaggregation"] for r in serving)
            for k in ("PD", "AF")}
    ppd = {k: statistics.mean(r["perf_per_dollar"]["FluidGPU (throughput)"]
                              / r["perf_per_dollar"][f"{k} disaggregation"] for r in serving)
           for k in ("PD", "AF")}
    lines += ["", f"Mean over the three pairs: throughput {over['PD']:.2f}x over PD "
              f"(paper {PAPER['over PD']}x), {over['AF']:.2f}x over AF (paper "
              f"{PAPER['over AF']}x); Perf/$ {ppd['PD']:.2f}x over PD (paper "
              f"{PAPER['Perf/$ over PD']}x), {ppd['AF']:.2f}x over AF (paper "
              f"{PAPER['Perf/$ over AF']}x)."]
    return lines


def solve_markdown(solve: list[dict]) -> list[str]:
    if not solve:
        return []
    lines = ["", "## Throughput MILP solve time", "",
              "Per layer: the cycle time over the layers planned together, against one "
              "layer's placement reused for every layer (the paper's reuse, what `decide` "
              "does).", "",
              "| devices | kernels | formulation | gap asked | seconds | status | proven gap | "
              "cycle us | per layer us (vs reuse) |", "|---|---:|---|---:|---:|---|---:|---:|---:|"]
    reused = {s["devices"]: s["cycle_us"] for s in solve
              if s.get("layers") == 1 and s["gap"] == 0.0 and s["cycle_us"]}
    for s in solve:
        cyc = f"{s['cycle_us']:.1f}" if s["cycle_us"] else ""
        proven = f"{s['proven_gap']:.2%}" if "proven_gap" in s else ""
        per = ""
        if s["cycle_us"] and "layers" in s and s["devices"] in reused:
            layer = s["cycle_us"] / s["layers"]
            per = f"{layer:.1f} ({layer / reused[s['devices']] - 1:+.1%})"
        lines.append(f"| {s['devices']} | {s['kernels']} | {s.get('formulation', 'per kernel')}"
                     f" | {s['gap']} | {s['seconds']:.2f} | "
                     f"{s['status']} | {proven} | {cyc} | {per} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="also run every model's "
                        "partitioned program (minutes per large model)")
    parser.add_argument("--store", type=Path, default=Path("outputs/artifacts"))
    parser.add_argument("--out", type=Path, default=Path("outputs/bench"))
    parser.add_argument("--render", action="store_true", help="only re-render gpus.md and "
                        "the plots from an earlier run's gpus.json")
    parser.add_argument("--sections",
                        default="pairs,serving,solve,pipelining,periods,cluster",
                        help="comma-separated: pairs, serving, solve, pipelining, periods, "
                        "cluster")
    parser.add_argument("--set", nargs="*", default=[], help="overrides for every build, "
                        "e.g. gpus.comm_on_device=0")
    args = parser.parse_args()
    EXTRA.extend(args.set)
    sections = args.sections.split(",")
    register_configs()
    w = closedform.Workload()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.render:
        saved = json.loads((args.out / "gpus.json").read_text())
        render(saved["rows"], saved["serving"], saved["solve"], saved["checks"],
               saved.get("pipelining", []), w, args.out, saved.get("periods", []),
               saved.get("cluster", []))
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        rows = pairs_table(args.store, tmp) if "pairs" in sections else []
        serving = serving_table(args.store, tmp, w) if "serving" in sections else []
        solve = solve_times(args.store, tmp) if "solve" in sections else []
        pipe = pipelining(args.store, tmp) if "pipelining" in sections else []
        periods = periods_table(args.store, tmp) if "periods" in sections else []
        cluster = cluster_table(args.store, tmp) if "cluster" in sections else []
        checks = check_all(args.store, tmp) if args.check else []
    (args.out / "gpus.json").write_text(json.dumps(
        {"rows": rows, "serving": serving, "solve": solve, "checks": checks,
         "pipelining": pipe, "periods": periods, "cluster": cluster,
         "workload": w.__dict__, "overrides": EXTRA}, indent=2) + "\n")
    render(rows, serving, solve, checks, pipe, w, args.out, periods, cluster)


def render(rows, serving, solve, checks, pipe, w, out: Path, periods=(), cluster=()) -> None:
    text = markdown(rows, serving, solve, checks, w) + "\n".join(
        periods_markdown(list(periods)) + cluster_markdown(list(cluster))) + (
        "\n" if periods or cluster else "")
    if pipe:
        text += "\n## Pipelined decode steps (serving simulator, Fig. 10(a))\n\n" + \
            "| mode | forwards/s | share of the bound | simulated s | wall s |\n" + \
            "|---|---:|---:|---:|---:|\n" + "".join(
                f"| {p['mode']} | {p['forwards_per_s']:.1f} | {p['share_of_bound']:.1%} | "
                f"{p['simulated_s']:.3f} | {p['wall_s']:.1f} |\n" for p in pipe)
    (out / "gpus.md").write_text(text)
    plots(rows, serving, out)
    console.print(f"wrote {out / 'gpus.md'}")


if __name__ == "__main__":
    main()
