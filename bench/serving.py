"""Serving heterogeneous GPUs in the discrete-event simulation (not a test; minutes):
FluidGPU's Fig. 7/8 (normalized latency against request rate, P99 TTFT and TPOT at one rate,
the highest rate within the SLO) against PD and AF, Fig. 11 (the monitor's window W and
threshold beta under a bursty load), Fig. 12(a) (the link throttled to 100/50/25 Gbps), and
the simulator's speed on 1,000 requests of the 32-layer Llama-3-8B.

    .venv/bin/python bench/serving.py                 # every section, the first pair
    .venv/bin/python bench/serving.py --sections speed,fig7
    .venv/bin/python bench/serving.py --devices a100,a100,l40s --sections fig7  # a cluster

Everything is pimbuild's cost model (roofline kernel times, docs/design.md §10) played out
in the simulation of ``pimbuild.targets.gpus.systems.serving``; no GPU is used. Writes
outputs/bench/serving.{json,md} and serving_latency.png.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from gpus import loaded  # noqa: E402

from pimbuild.core.console import console  # noqa: E402
from pimbuild.targets.gpus.systems import serving, serving_systems  # noqa: E402
from pimbuild.targets.gpus.systems.arrivals import Request, offline, poisson  # noqa: E402

DEVICES = ["a100", "l40s"]  # --devices
OUTPUT_LEN, SLO = 129, 0.05
PAPER = {"fig7": "FluidGPU sustains higher request rates than PD and AF before normalized "
                 "latency rises (Fig. 7)",
         "fig11": "W = 300 ms and beta = 1.5 are the defaults; latency varies little around "
                  "them (Fig. 11)",
         "fig12a": "throughput falls as the link is throttled from 200 to 25 Gbps, and "
                   "FluidGPU keeps an edge (Fig. 12(a))"}


def setup(store: Path, tmp: Path, link: str = "rdma200") -> dict:
    """Both phases of Llama-3-8B planned on DEVICES over ``link``: the systems to serve."""
    import gpus

    saved = list(gpus.EXTRA)
    gpus.EXTRA[:] = [f"link={link}"]
    try:
        on = tuple(DEVICES)
        target, pre_data, pre_ctx, pre_pl, _ = loaded("llama3_8b_prefill", on, store,
                                                      tmp / f"pre-{link}", "decide")
        _, dec_data, dec_ctx, dec_pl, _ = loaded("llama3_8b", on, store, tmp / f"dec-{link}",
                                                 "decide")
    finally:
        gpus.EXTRA[:] = saved
    pre = (pre_ctx, pre_pl["place"], pre_data)
    dec = (dec_ctx, dec_pl["place"], dec_data)
    return {"systems": serving_systems.systems(pre, dec, list(target.devices), "throughput", True),
            "kv": serving.kv_map(pre_data, dec_data), "link": dec_ctx.link,
            "batch": dec_data["tokens"], "prompt": pre_data["prompt"]}


def run(s: dict, name: str, requests: list[Request], monitor=None, depth: int = 8) -> dict:
    began = time.perf_counter()
    out = serving.run(s["systems"][name], requests, s["kv"], s["link"], s["batch"], depth,
                      monitor)
    return out | {"wall_s": time.perf_counter() - began}


def best_of(s: dict, kind: str, requests: list[Request]) -> str:
    names = [k for k in s["systems"] if k.startswith(kind)]
    return max(names, key=lambda k: run(s, k, requests)["tokens_per_s"])


def capacity(s: dict, name: str, n: int = 100) -> float:
    """Requests/s of ``name`` serving ``n`` requests offline."""
    return run(s, name, offline(n, s["prompt"], OUTPUT_LEN))["tokens_per_s"] / OUTPUT_LEN


def speed(s: dict) -> dict:
    """1,000 requests (1,020 input / 129 output tokens) at 70% of the planned capacity."""
    rate = 0.7 * capacity(s, "planned")
    reqs = poisson(rate, 1000, s["prompt"], OUTPUT_LEN, seed=1)
    monitor = serving.Monitor(0.3, 1.5, 0.03)
    out = run(s, "planned", reqs, monitor)
    console.print(f"speed: {out['wall_s']:.1f} s wall for 1,000 requests, "
                  f"{out['simulated_s'] / out['wall_s']:.3g} simulated s per wall s")
    return {"rate": rate, **out}


def fig7_8(s: dict, n: int = 200) -> dict:
    """Normalized latency against rate (shares of the planned system's capacity) for the
    planned system and the better PD and AF; P99 TTFT / TPOT at 60%; the highest rate
    within the SLO."""
    probe = offline(60, s["prompt"], OUTPUT_LEN)
    names = {"FluidGPU (throughput + monitor)": "planned", "PD": best_of(s, "PD", probe),
             "AF": best_of(s, "AF", probe)}
    cap = capacity(s, "planned")
    monitor = serving.Monitor(0.3, 1.5, 0.03)
    curve = []
    for share in (0.2, 0.4, 0.6, 0.8, 1.0, 1.2):
        reqs = poisson(share * cap, n, s["prompt"], OUTPUT_LEN, seed=2)
        row = {"share": share, "rate": share * cap}
        for label, name in names.items():
            out = run(s, name, reqs, monitor if name == "planned" else None)
            row[label] = out
        curve.append(row)
        console.print(f"fig7 rate {share * cap:.3g}/s: " + ", ".join(
            f"{k} {row[k]['mean_normalized_latency_s'] * 1e3:.3g} ms/token" for k in names))
    max_rate = {label: serving.max_rate(s["systems"][name], s["prompt"], OUTPUT_LEN, SLO,
                                        s["kv"], s["link"], s["batch"], 8,
                                        monitor if name == "planned" else None, n=100)
                for label, name in names.items()}
    console.print(f"max rate within {SLO * 1e3:g} ms/token: {max_rate}")
    return {"systems": names, "capacity": cap, "curve": curve, "max_rate": max_rate}


def bursty(rates: list[float], per_phase: int, prompt: int, seed: int = 3) -> list[Request]:
    """Poisson phases at ``rates`` in turn, ``per_phase`` requests each."""
    rng, t, out = random.Random(seed), 0.0, []
    for rate in rates:
        for _ in range(per_phase):
            t += rng.expovariate(rate)
            out.append(Request(t, prompt, OUTPUT_LEN))
    return out


def fig11(s: dict) -> list[dict]:
    """The monitor's W and beta under a load that goes low, high (beyond the latency
    placement's capacity), low."""
    cap = capacity(s, "planned")
    reqs = bursty([0.2 * cap, 0.9 * cap, 0.2 * cap], 80, s["prompt"])
    rows = []
    for window in (0.1, 0.3, 1.0):
        for beta in (1.2, 1.5, 2.0):
            out = run(s, "planned", reqs, serving.Monitor(window, beta, 0.03))
            rows.append({"window_s": window, "beta": beta, **out})
            console.print(f"fig11 W {window} beta {beta}: "
                          f"{out['mean_normalized_latency_s'] * 1e3:.3g} ms/token, "
                          f"{out['switches']} switches")
    for name in ("throughput only", "latency only"):
        only = {"throughput only": "throughput", "latency only": "latency"}[name]
        plans = {only: s["systems"]["planned"].plans[only]}
        planned = s["systems"]["planned"]
        system = serving.System(plans, planned.n_dev, planned.price_per_hour)
        out = serving.run(system, reqs, s["kv"], s["link"], s["batch"], 8, None)
        rows.append({"window_s": None, "beta": None, "fixed": name, **out})
        console.print(f"fig11 {name}: {out['mean_normalized_latency_s'] * 1e3:.3g} ms/token")
    return rows


def fig12a(store: Path, tmp: Path) -> list[dict]:
    """Offline throughput of the planned system (re-planned per link), PD and AF."""
    rows = []
    for link in ("rdma200", "rdma100", "rdma50", "rdma25"):
        s = setup(store, tmp, link)
        reqs = offline(150, s["prompt"], OUTPUT_LEN)
        row = {"link": link}
        for label, kind in (("planned", "planned"), ("PD", "PD"), ("AF", "AF")):
            names = [k for k in s["systems"] if k.startswith(kind)]
            row[label] = max(run(s, k, reqs)["tokens_per_s"] for k in names)
        rows.append(row)
        console.print(f"fig12a {link}: {row}")
    return rows


def markdown(result: dict) -> str:
    lines = ["# bench/serving.py", "", f"Llama-3-8B (32 layers) on {' + '.join(DEVICES)}, "
             f"prompt 1,020, {OUTPUT_LEN} output tokens, decode batch 16, depth 8; "
             "pimbuild's cost model (no GPU).", ""]
    if "speed" in result:
        sp = result["speed"]
        lines += ["## Simulator speed", "",
                  f"1,000 requests at {sp['rate']:.3g}/s with the monitor: "
                  f"{sp['wall_s']:.1f} s wall, {sp['simulated_s']:.1f} s simulated "
                  f"({sp['simulated_s'] / sp['wall_s']:.3g} simulated s per wall s), "
                  f"{sp['prefills']} prefills, {sp['decode_steps']} decode forwards.", ""]
    if "fig7" in result:
        f7 = result["fig7"]
        labels = list(f7["systems"])
        lines += ["## Fig. 7/8: normalized latency (ms/token, mean / P99) against rate", "",
                  f"Systems: {f7['systems']}. Planned capacity {f7['capacity']:.3g} "
                  "requests/s.", "",
                  "| rate /s | " + " | ".join(labels) + " |", "|---:|" + "---:|" * len(labels)]
        for row in f7["curve"]:
            lines.append(f"| {row['rate']:.3g} | " + " | ".join(
                f"{row[k]['mean_normalized_latency_s'] * 1e3:.3g} / "
                f"{row[k]['p99_normalized_latency_s'] * 1e3:.3g}" for k in labels) + " |")
        mid = next(r for r in f7["curve"] if r["share"] == 0.6)
        lines += ["", f"At {mid['rate']:.3g} requests/s (60% of planned capacity):", "",
                  "| system | tokens/s | TTFT P50 / P99 ms | TPOT P50 / P99 ms | bottleneck "
                  "compute / comm wait / idle |", "|---|---:|---:|---:|---|"]
        for k in labels:
            v = mid[k]
            lines.append(f"| {k} | {v['tokens_per_s']:.4g} | {v['p50_ttft_s'] * 1e3:.3g} / "
                         f"{v['p99_ttft_s'] * 1e3:.3g} | {v['p50_tpot_s'] * 1e3:.3g} / "
                         f"{v['p99_tpot_s'] * 1e3:.3g} | "
                         f"{v['bottleneck_compute_share']:.0%} / "
                         f"{v['bottleneck_comm_wait_share']:.0%} / "
                         f"{v['bottleneck_idle_share']:.0%} |")
        lines += ["", f"Highest rate within {SLO * 1e3:g} ms/token: " + ", ".join(
            f"{k} {v:.3g}/s" for k, v in f7["max_rate"].items()), "",
            f"Paper: {PAPER['fig7']}.", ""]
    if "fig11" in result:
        lines += ["## Fig. 11: the monitor's W and beta (bursty load: 20% / 90% / 20% of "
                  "capacity)", "", "| W s | beta | ms/token mean / P99 | tokens/s | switches |",
                  "|---:|---:|---:|---:|---:|"]
        for r in result["fig11"]:
            w = r.get("fixed") or r["window_s"]
            lines.append(f"| {w} | {r['beta'] if r['beta'] else ''} | "
                         f"{r['mean_normalized_latency_s'] * 1e3:.3g} / "
                         f"{r['p99_normalized_latency_s'] * 1e3:.3g} | "
                         f"{r['tokens_per_s']:.4g} | {r['switches']} |")
        lines += ["", f"Paper: {PAPER['fig11']}.", ""]
    if "fig12a" in result:
        lines += ["## Fig. 12(a): offline tokens/s against link bandwidth", "",
                  "| link | planned | PD | AF | planned / PD | planned / AF |",
                  "|---|---:|---:|---:|---:|---:|"]
        for r in result["fig12a"]:
            lines.append(f"| {r['link']} | {r['planned']:.4g} | {r['PD']:.4g} | "
                         f"{r['AF']:.4g} | {r['planned'] / r['PD']:.2f} | "
                         f"{r['planned'] / r['AF']:.2f} |")
        lines += ["", f"Paper: {PAPER['fig12a']}.", ""]
    return "\n".join(lines) + "\n"


def plot(result: dict, out: Path) -> None:
    if "fig7" not in result:
        return
    from pimbuild.core.plots import plt, save_figure

    f7 = result["fig7"]
    fig, ax = plt.subplots(figsize=(6, 4))
    for label in f7["systems"]:
        ax.plot([r["rate"] for r in f7["curve"]],
                [r[label]["mean_normalized_latency_s"] * 1e3 for r in f7["curve"]],
                marker="o", label=label)
    ax.axhline(SLO * 1e3, color="k", lw=0.8, ls="--")
    ax.set_xlabel("requests/s (Poisson)")
    ax.set_ylabel("normalized latency, ms/token")
    ax.set_yscale("log")
    ax.legend(fontsize=7)
    save_figure(fig, out / "serving_latency.png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", type=Path, default=Path("outputs/artifacts"))
    parser.add_argument("--out", type=Path, default=Path("outputs/bench"))
    parser.add_argument("--sections", default="speed,fig7,fig11,fig12a")
    parser.add_argument("--devices", default=",".join(DEVICES),
                        help="the devices, comma-separated (two or more)")
    args = parser.parse_args()
    DEVICES[:] = args.devices.split(",")
    sections = args.sections.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        s = setup(args.store, tmp)
        if "speed" in sections:
            result["speed"] = speed(s)
        if "fig7" in sections:
            result["fig7"] = fig7_8(s)
        if "fig11" in sections:
            result["fig11"] = fig11(s)
        if "fig12a" in sections:
            result["fig12a"] = fig12a(args.store, tmp)
    (args.out / "serving.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "serving.md").write_text(markdown(result))
    plot(result, args.out)
    console.print(f"wrote {args.out / 'serving.md'}")


if __name__ == "__main__":
    main()
