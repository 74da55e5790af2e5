"""``report.md`` and the plots of a simulate report (matplotlib, no display needed), in the
target's own names for its sides and units (``Sides``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from matplotlib.ticker import LogFormatter

from pimbuild.core.check import outcome
from pimbuild.core.plots import plt, save_figure
from pimbuild.targets.offload.nests import display_name
from pimbuild.targets.offload.protocol import Sides
from pimbuild.targets.offload.summary import losses, slow_host_note

PLOTS = ("speedup_vs_cores.png", "bandwidth_vs_theta.png", "time_breakdown.png")


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.4g}"


def markdown(r: dict[str, Any], s: Sides) -> str:
    a = r["agreement"]
    lines = [
        f"# pimbuild report: policy `{r['policy']}`, {r[s.units]} {s.label}",
        "",
        f"Speedup over CPU-only: **{r['speedup']:.3f}x** "
        f"(T_hybrid {_ms(r['t_hybrid_s'])} ms vs {_ms(r['t_cpu_only_s'])} ms).",
        *([f"{slow_host_note(r['over_eager'])}."] if r.get("over_eager") else []),
        f"Offloaded {len(r['offloaded'])} of {len(r['nests'])} nests "
        f"({r['offloaded_share_of_nests']:.0%}), capturing "
        f"{r['captured_share_of_cpu_time']:.1%} of CPU-only time, in "
        f"{len(r['segments'])} segment(s): N_region = {r['n_region']}.",
        f"Offloaded sources: {', '.join(r['offloaded_sources']) or 'none'}.",
        f"Borderline decisions (the deciding T_cpu or BW_read within its own timing spread of "
        f"the threshold; another run may flip them): "
        f"{', '.join(map(str, r.get('borderline', []))) or 'none'}.",
        f"theta = {r['theta_gbps']:.3g} GB/s (B_cpu {r['b_cpu_gbps']:.3g} GB/s); counters: "
        f"{r['counter_backend']}; copy model: {r['copy_model']}.",
        f"Hybrid program vs PyTorch eager: {outcome(r['hybrid_check'])}; "
        f"{r['hybrid_check']['transitions']} transitions counted at run time.",
        "",
        "| term | ms |", "|---|---:|",
        f"| T_{s.host} | {_ms(r[f't_{s.host}_s'])} |",
        f"| T_{s.device} | {_ms(r[f't_{s.device}_s'])} |",
        *[f"| T_copy ({k}) | {_ms(v)} |" for k, v in r["t_copy"].items()],
        f"| N_region x T_sw | {_ms(r['t_switch_s'])} |",
        f"| T_hybrid | {_ms(r['t_hybrid_s'])} |",
        "",
        "| placement | speedup |", "|---|---:|",
        f"| {r['policy']} | {r['speedup']:.3f} |",
        *[f"| {k} | {v:.3f} |" for k, v in r["baselines"].items()],
        "",
        f"Agreement with the per-nest ground truth: {a['agree']}/{a['total']} = "
        f"{a['accuracy']:.3f} (false positives {a['false_positives']}, false negatives "
        f"{a['false_negatives']}).",
        *([f"Costliest false positives (what each, offloaded alone, adds to T_hybrid): "
           f"{losses(r['false_positives'])}."] if r.get("false_positives") else []),
        "",
        f"| {s.units} | " + " | ".join(k for k in r["sweep"][0] if k != s.units) + " |",
        "|---:|" + "---:|" * (len(r["sweep"][0]) - 1),
        *["| {} | {} |".format(row[s.units], " | ".join(
            f"{v['speedup']:.3f}" for k, v in row.items() if k != s.units))
          for row in r["sweep"]],
        "",
        f"| id | source | target | decided by | T_cpu ms | T_{s.device} ms | BW GB/s | store | "
        "beneficial |",
        "|---:|---|---|---|---:|---:|---:|---:|---|",
    ]
    for n in r["nests"]:
        bw = "-" if n["bw_read_gbps"] is None else f"{n['bw_read_gbps']:.3g}"
        sb = "-" if n["store_bound"] is None else f"{n['store_bound']:.2f}"
        name = display_name(n["source_module"], n["source_op"])
        lines.append(f"| {n['id']} | {name} | {n['target']} | {n['decided_by']} | "
                     f"{_ms(n['t_cpu_s'])} | {_ms(n[f't_{s.device}_s'])} | {bw} | {sb} | "
                     f"{'yes' if n['beneficial'] else 'no'} |")
    return "\n".join(lines) + "\n"


def _speedup_vs_units(r: dict[str, Any], s: Sides, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(5, 3.5))
    cores = [row[s.units] for row in r["sweep"]]
    for name in (k for k in r["sweep"][0] if k != s.units):
        ax.plot(cores, [row[name]["speedup"] for row in r["sweep"]], marker="o", label=name)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xticks(cores, [str(c) for c in cores])
    ax.set_xlabel(s.label)
    ax.set_ylabel("speedup over CPU-only")
    ax.legend()
    save_figure(fig, path)


def _bandwidth_vs_theta(r: dict[str, Any], s: Sides, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(max(5, 0.15 * len(r["nests"])), 3.5))
    ids = [n["id"] for n in r["nests"]]
    bw = [max(n["bw_read_gbps"] or 0.0, 1e-4) for n in r["nests"]]
    colors = ["tab:red" if n["target"] == s.device else "tab:blue" for n in r["nests"]]
    ax.bar(ids, bw, color=colors, width=0.8)
    ax.set_xlim(min(ids, default=0) - 0.6, max(ids, default=0) + 0.6)
    ax.axhline(r["theta_gbps"], color="black", ls="--", lw=1, label="theta")
    ax.set_yscale("log")
    # plain labels (1e-03, 0.1): parsing mathtext's 10^-3 was a fifth of this plot's time
    ax.yaxis.set_major_formatter(LogFormatter())
    ax.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False))
    ax.set_xlabel(f"nest id (red: {s.device}, blue: {s.host})")
    ax.set_ylabel("read bandwidth GB/s")
    ax.legend()
    save_figure(fig, path)


def _time_breakdown(r: dict[str, Any], s: Sides, path: Path) -> None:
    terms = (f"t_{s.host}_s", f"t_{s.device}_s", "t_copy_s", "t_switch_s")
    rows = {"cpu-only": {terms[0]: r["t_cpu_only_s"]},
            r["policy"]: {k: r[k] for k in terms},
            **{k: v for k, v in r["baseline_breakdowns"].items() if k != "cpu"}}
    fig, ax = plt.subplots(figsize=(5, 3.5))
    bottom = [0.0] * len(rows)
    for term in terms:
        values = [row.get(term, 0.0) * 1e3 for row in rows.values()]
        ax.bar(list(rows), values, bottom=bottom, label=term.removesuffix("_s"))
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylabel("ms per forward")
    ax.legend()
    save_figure(fig, path)


def plots(r: dict[str, Any], s: Sides, out_dir: Path) -> None:
    _speedup_vs_units(r, s, out_dir / PLOTS[0])
    _bandwidth_vs_theta(r, s, out_dir / PLOTS[1])
    _time_breakdown(r, s, out_dir / PLOTS[2])


def render(r: dict[str, Any], s: Sides, out_dir: Path) -> None:
    """``report.md`` and the plots: what a target built on the offload core may render."""
    (out_dir / "report.md").write_text(markdown(r, s))
    plots(r, s, out_dir)
