"""The GPU target's report: the closing lines a build prints (``summary``) and ``report.md``
(``markdown``), from simulate's ``report.json``."""

from __future__ import annotations

from typing import Any

from pimbuild.core.check import outcome
from pimbuild.targets.gpus.costmodel import robust


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
    lines = [f"[bold]{pl['throughput']:.4g} {r['unit']}[/] with planner {r['planner']} on "
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
    if r.get("timeline"):
        e = r["timeline"]["events"]
        lines.append(f"timeline: {r['timeline']['file']} in the simulate folder "
                     f"({e.get('kernel', 0)} kernel or segment spans, {e.get('transfer', 0)} "
                     f"transfers, {e.get('request', 0)} request spans); "
                     f"{r['timeline']['open_with']}")
    return lines + kernel_times_lines(r.get("kernel_times") or {})


def _counts(v: dict[str, Any]) -> str:
    """``12/30 measured (80% of its time), 3 interpolated (5%)``."""
    total = v["measured"] + v.get("interpolated", 0) + v["predicted"]
    text = f"{v['measured']}/{total} measured ({v['measured_time_share']:.0%} of its time)"
    if v.get("interpolated"):
        text += f", {v['interpolated']} interpolated ({v['interpolated_time_share']:.0%})"
    return text


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
    if backend == "auto":
        parts = [f"{d} ({v['grid']}): {_counts(v)}" if v.get("grid")
                 else f"{d}: no measured data" for d, v in (kt.get("sources") or {}).items()]
        notes = [f"{d}'s measurements are {', '.join(v['grid_dtypes'])} only: this build's "
                 f"{kt.get('precision')} kernels are predicted"
                 for d, v in (kt.get("sources") or {}).items()
                 if v.get("grid") and kt.get("precision") not in v.get("grid_dtypes", [])]
        raised = [f"{d} {v['raised_to_dram']}" for d, v in (kt.get("sources") or {}).items()
                  if v.get("raised_to_dram")]
        if raised:
            notes.append("measured with a warm L2, raised to their DRAM time at the GPU's "
                         f"sustained bandwidth: {', '.join(raised)} kernel(s)")
        return [f"kernel times: {'; '.join(parts)}; the rest predicted by {predicted}",
                *notes]
    parts = [f"{d} {_counts(v)}" if v["table"]
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
    rows = [("planned: " + r["planner"], r["planned"]), *r["baselines"].items()]
    lines = [f"# pimbuild report: planner `{r['planner']}` on {' + '.join(r['devices'])}", "",
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
    marks = {key: {**dict.fromkeys(v.get("interpolated_ids", ()), " i"),
                   **dict.fromkeys(v.get("measured_ids", ()), " m")}
             for key, v in sources.items()}
    if any(marks.values()):
        lines += ["", "A time marked `m` was measured (a kernel-time table or the shipped "
                      "measurements), `i` interpolated between measured shapes; the others "
                      "are predicted."]
    layer = r.get("period", 1) > 1  # which of the placed layers a kernel belongs to
    lines += ["", "## Placement", "",
              "| id | " + ("layer | " if layer else "") + "kernel | kind | device | "
              + " | ".join(f"t {k} us" for k in keys) + " |",
              "|---:|" + ("---:|" if layer else "") + "---|---|---|" + "---:|" * len(keys)]
    for k in placement["kernels"]:
        lines.append(f"| {k['id']} | " + (f"{k['layer']} | " if layer else "")
                     + f"{k['name']} | {k['kind']} | {k['device']} | "
                     + " | ".join(f"{k[f't_{key}_s'] * 1e6:.3g}"
                                  + marks.get(key, {}).get(k["id"] % r["kernels"], "")
                                  for key in keys) + " |")
    return "\n".join(lines) + "\n"
