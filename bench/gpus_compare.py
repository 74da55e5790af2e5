"""Two runs of ``bench/gpus.py`` side by side (not a test): each pair and model's planned
speedups over the baselines, the serving throughputs and the Fig. 9 cluster, as ``A -> B``.

    .venv/bin/python bench/gpus.py --set gpus.backend=roofline --out outputs/bench_roofline
    .venv/bin/python bench/gpus.py --out outputs/bench_fitted
    .venv/bin/python bench/gpus_compare.py outputs/bench_roofline outputs/bench_fitted

Prints markdown.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

BASES = ("best single", "request distribution", "AF disaggregation", "layer pipeline")


def speedups(row: dict) -> dict[str, float]:
    base = row["baselines"]
    best = max(v["throughput"] for k, v in base.items() if k.endswith(" alone"))
    out = {"best single": row["planned"]["throughput"] / best}
    out.update({k: row["planned"]["throughput"] / base[k]["throughput"]
                for k in BASES[1:] if k in base})
    return out


def arrow(a: float | None, b: float | None, fmt: str = "{:.2f}") -> str:
    if a is None or b is None:
        return "n/a"
    return f"{fmt.format(a)} -> {fmt.format(b)}"


def pairs(a: dict, b: dict) -> list[str]:
    lines = ["| pair | model | policy | x best single | x RD | x AF | x PP | faster on 2nd "
             "(count / time) |", "|---|---|---|---|---|---|---|---|"]
    index = {(r["pair"], r["model"], r["policy"]): r for r in b["rows"]}
    for r in a["rows"]:
        s = index.get((r["pair"], r["model"], r["policy"]))
        if s is None:
            continue
        x, y = speedups(r), speedups(s)
        cells = [arrow(x.get(k), y.get(k)) for k in BASES]
        fig2 = (f"{r['fig2_count']:.0%} / {r['fig2_time']:.0%} -> {s['fig2_count']:.0%} / "
                f"{s['fig2_time']:.0%}")
        lines.append(f"| {r['pair']} | {r['model']} | {r['policy']} | " + " | ".join(cells)
                     + f" | {fig2} |")
    return lines


def serving(a: dict, b: dict) -> list[str]:
    names = list(a["serving"][0]["tokens_per_s"]) if a["serving"] else []
    lines = ["| pair | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    index = {r["pair"]: r for r in b["serving"]}
    for r in a["serving"]:
        s = index[r["pair"]]
        lines.append(f"| {r['pair']} tokens/s | " + " | ".join(
            arrow(r["tokens_per_s"][n], s["tokens_per_s"].get(n), "{:.4g}") for n in names)
            + " |")
    for label, key in (("PD", "PD disaggregation"), ("AF", "AF disaggregation"),
                       ("RD", "request distribution")):
        ratio = [[r["tokens_per_s"]["FluidGPU (throughput)"] / r["tokens_per_s"][key]
                  for r in run["serving"]] for run in (a, b)]
        mean = [sum(r) / len(r) for r in ratio]
        lines.append(f"\nMean over the pairs, planned over {label}: "
                     f"{mean[0]:.2f}x -> {mean[1]:.2f}x")
    return lines


def cluster(a: dict, b: dict) -> list[str]:
    lines = ["| model | period | x best single | x RD | x AF | x PP | x PD serving |",
             "|---|---:|---|---|---|---|---|"]
    index = {(r["model"], r["period"]): r for r in b["cluster"]}
    for r in a["cluster"]:
        s = index.get((r["model"], r["period"]))
        if s is None:
            continue
        keys = ("best single device", "request distribution", "AF disaggregation",
                "layer pipeline")
        cells = [arrow(r["speedup_over"].get(k), s["speedup_over"].get(k)) for k in keys]
        pd = [x.get("serving", {}).get("speedup_over", {}).get("PD disaggregation")
              for x in (r, s)]
        lines.append(f"| {r['model']} | {r['period']} | " + " | ".join(cells)
                     + f" | {arrow(*pd)} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    args = ap.parse_args()
    a, b = (json.loads((p / "gpus.json").read_text()) for p in (args.before, args.after))
    print("\n".join(["## Planned over each baseline", "", *pairs(a, b), "",
                     "## Llama-3-8B serving (tokens/s)", "", *serving(a, b), "",
                     "## Fig. 9 cluster", "", *cluster(a, b)]))


if __name__ == "__main__":
    main()
