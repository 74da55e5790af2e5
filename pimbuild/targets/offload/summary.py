"""The PIM target's console summary: the candidates table with measurements and decisions,
the profile's and calibrate's lines, and the closing lines of a simulate report
(``PimTarget.summarize``; ``report.md`` holds the same and more)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from rich.table import Table

from pimbuild import targets
from pimbuild.core.check import outcome
from pimbuild.targets.offload.decide import policy_params
from pimbuild.targets.offload.nests import display_name
from pimbuild.targets.offload.protocol import Sides


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.3g}"


def _fmt(value: str, spec: str) -> str:
    return format(float(value), spec) if value not in ("", None) else "-"


# Columns dropped when the console is narrower than WIDE (the full table is in report.md).
DETAIL = {"dims", "n_total", "moved MB", "ld/st/ar/m", "share"}
WIDE = 120


def _count(c: dict, k: int) -> str:
    """A nest's n_iter (k=0) or n_total (1): its value, or, where its bounds vary with an
    enclosing loop, the range over its invocations (``dims`` then shows the largest)."""
    per = c.get("per_invocation")
    if not per:
        return f"{c[('n_iter', 'n_total')[k]]:,}"
    return f"{min(p[k] for p in per):,}..{max(p[k] for p in per):,}"


def candidates_table(candidates: dict, title: str, profile: dict[int, dict] | None = None,
                     decisions: dict[int, dict] | None = None, width: int = WIDE) -> Table:
    """One row per nest; with ``profile`` (timing + counters rows by id), its measurements;
    with ``decisions`` (by id), where it runs and which condition decided it. Narrower than
    ``WIDE`` columns, the detail columns are left out so that the rest stays readable."""
    table = Table(title=title, title_justify="left", pad_edge=False)
    columns = ["id", "source", "dims", "n_iter", "n_total", "moved MB", "ld/st/ar/m"]
    if profile:
        columns += ["T_cpu ms", "share", "BW GB/s", "store"]
    if decisions:
        columns += ["placed"]
    shown = [c for c in columns if width >= WIDE or c not in DETAIL]
    for col in shown:
        table.add_column(col, justify="left" if col in ("source", "dims") else "right",
                         overflow="fold" if col == "source" else "ellipsis",
                         no_wrap=col != "source")
    for c in candidates["candidates"]:
        mix = c["op_mix"]
        cells = {"id": str(c["id"]), "source": display_name(c["source_module"], c["source_op"]),
                 "dims": "x".join(map(str, c["parallel_dims"])), "n_iter": _count(c, 0),
                 "n_total": _count(c, 1), "moved MB": _mb(c["moved_bytes"]),
                 "ld/st/ar/m": "/".join(str(v) if isinstance(v, int) else f"{v:.3g}"
                                        for v in (mix[k] for k in ("loads", "stores", "arith",
                                                                   "math")))}
        if profile:
            m = profile[c["id"]]
            cells |= {"T_cpu ms": _fmt(float(m["t_cpu_s"]) * 1e3, ".3g"),
                      "share": _fmt(m["share"], ".1%"), "BW GB/s": _fmt(m["bw_read_gbps"], ".3g"),
                      "store": _fmt(m["store_bound"], ".2f")}
        if decisions:
            d = decisions[c["id"]]
            color = "red" if d["target"] != "host" else "blue"
            cells["placed"] = f"[{color}]{d['target']}[/] {d['decided_by']}"
        table.add_row(*[cells[col] for col in shown])
    return table


def report_lines(r: dict, s: Sides) -> list[str]:
    """The closing summary of a simulate report."""
    a = r["agreement"]
    base = ", ".join(f"{k} {v:.2f}x" for k, v in r["baselines"].items())
    sweep = ", ".join(f"{row[s.units]}: {row[r['policy']]['speedup']:.2f}x"
                      for row in r["sweep"])
    c5 = (f" + C5 (I_compute {r['i_compute']:g})" if r.get("i_compute") is not None
          and r["policy"] in ("torchpim", "operator") else "")
    return [
        f"[bold]speedup {r['speedup']:.3f}x[/] over CPU-only with policy {r['policy']}{c5} on "
        f"{r[s.units]} {s.label}: T_hybrid {r['t_hybrid_s'] * 1e3:.4g} ms = {s.host} "
        f"{r[f't_{s.host}_s'] * 1e3:.4g} + {s.device} {r[f't_{s.device}_s'] * 1e3:.4g} + copy "
        f"{r['t_copy_s'] * 1e3:.4g} ({r['copy_model']}) + switch "
        f"{r['t_switch_s'] * 1e3:.4g} ms; N_region {r['n_region']}",
        f"offloaded {len(r['offloaded'])}/{len(r['nests'])} nests "
        f"({first(r['offloaded_sources']) or 'none'}), "
        f"{r['captured_share_of_cpu_time']:.1%} of CPU time; "
        f"baselines: {base}; by {s.units}: {sweep}",
        *([f"{len(r['borderline'])} decision(s) within the timing spread of a threshold, "
           f"another run may flip them: nests {', '.join(map(str, r['borderline']))}"]
          if r.get("borderline") else []),
        *([_warned(slow_host_note(r["over_eager"]), r["over_eager"])]
          if r.get("over_eager") else []),
        f"agreement with ground truth {a['agree']}/{a['total']} (FP {a['false_positives']}, "
        f"FN {a['false_negatives']}); hybrid program {outcome(r['hybrid_check'])}",
        *([f"costliest false positives (T_hybrid added by each offloaded alone): "
           f"{losses(r['false_positives'])}"] if r.get("false_positives") else []),
    ]


# A CPU-only program this much slower than eager (median ratio) is flagged in the summary:
# every speedup over it is inflated by the ratio (issue 13 item 8).
SLOW_HOST = 1.1


def slow_host_note(over: dict | None) -> str:
    """The closing line's comparison of the CPU-only program with eager, '' if unmeasured."""
    if not over:
        return ""
    ratio = over["cpu_only_over_eager"]
    note = (f"CPU-only program at {ratio:.2f}x PyTorch eager's forward time (one thread, "
            f"median of {over['rounds']} alternate rounds, quartiles {over['ratio_p25']:.2f}-"
            f"{over['ratio_p75']:.2f}); speedup over eager {over['speedup']:.3f}x")
    if ratio > SLOW_HOST:
        note += (f"; the host program is slower than eager, which inflates the speedup over "
                 f"CPU-only by {ratio:.2f}x")
    return note


def _warned(line: str, over: dict) -> str:
    """``line`` in the warning colour where the host program is slower than eager."""
    return (f"[bold yellow]{line}[/]" if over["cpu_only_over_eager"] > SLOW_HOST
            else line)


def first(names: list[str], most: int = 8) -> str:
    """The first ``most`` names, and how many more (report.md lists them all)."""
    more = len(names) - most
    return ", ".join(names[:most]) + (f" and {more} more in report.md" if more > 0 else "")


def losses(false_positives: list[dict], most: int = 3) -> str:
    """The first ``most`` of simulate's ``false_positives``: name, id and loss."""
    shown = [f"{f['source']} #{f['id']} +{f['loss_s'] * 1e3:.4g} ms"
             for f in false_positives[:most]]
    more = len(false_positives) - most
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _profile_rows(profile_dir: Path) -> dict[int, dict]:
    """timing.csv and counters.csv merged, by nest id."""
    rows: dict[int, dict] = {}
    for name in ("timing.csv", "counters.csv"):
        with (profile_dir / name).open() as f:
            for row in csv.DictReader(f):
                rows.setdefault(int(row["id"]), {}).update(row)
    return rows


def _json(folder: Path, name: str) -> Any:
    return json.loads((folder / name).read_text())


def summarize(cfg: Any, dirs: dict[str, Path], width: int = WIDE) -> list[Any]:
    """What a build of the PIM target prints, from the artifact folders it built (``dirs``,
    by stage): the candidates table, the profile's and calibrate's lines, the report's."""
    out: list[Any] = []
    profiled = _profile_rows(dirs["profile"]) if "profile" in dirs else None
    decided = ({d["id"]: d for d in _json(dirs["decide"], "decisions.json")["decisions"]}
               if "decide" in dirs else None)
    if cfg.show_candidates and "extract" in dirs:
        candidates = _json(dirs["extract"], "candidates.json")
        out.append(candidates_table(
            candidates, f"{len(candidates['candidates'])} candidate nests of "
                        f"model '{cfg.model.name}' (fusion={cfg.lowering.fusion})",
            profiled, decided, width=width))
    if profiled is not None:
        info = _json(dirs["profile"], "profile.json")
        out.append(f"forward {info['forward_s'] * 1e3:.3g} ms ({info['estimator']} of "
                   f"{info['repetitions']}, median {info['forward_median_s'] * 1e3:.3g} ms), "
                   f"nests cover {info['coverage']:.1%} of it; "
                   f"counters: [bold]{info['counter_backend']}[/] "
                   f"({info['counter_backend_reason']})")
    if "calibrate" in dirs:
        cal = _json(dirs["calibrate"], "calibrate.json")
        theta = policy_params(cfg).theta(cal["b_cpu_gbps"])
        out.append(f"B_cpu {cal['b_cpu_gbps']:.3g} GB/s ({cal['source']}); "
                   f"theta {theta:.3g} GB/s")
    if "simulate" in dirs:
        report = _json(dirs["simulate"], "report.json")
        out += report_lines(report, Sides.of(targets.from_config(cfg)))
        if report.get("timeline"):
            out.append(timeline_line(dirs["simulate"], report["timeline"]))
    return out


def timeline_line(folder: Path, timeline: dict[str, Any]) -> str:
    """Where the timeline is, what it holds and how to open it."""
    events = timeline["events"]
    return (f"timeline: {folder / timeline['file']} ({events.get('spans', 0)} spans on "
            f"{events.get('tracks', 0)} tracks); {timeline['open_with']}")


def sweep_columns(report: dict[str, Any]) -> dict[str, str]:
    """The columns of a PIM report in a sweep table."""
    return {"speedup": f"{report['speedup']:.3f}",
            "oracle": f"{report['baselines']['oracle']:.3f}",
            "offloaded": str(report["offloaded"]), "N_region": str(report["n_region"]),
            "accuracy": f"{report['agreement']['accuracy']:.3f}",
            "over eager": (f"{report['over_eager']['speedup']:.3f}"
                           if report.get("over_eager") else "-")}


def headline(report: dict[str, Any]) -> dict[str, Any]:
    """The number a sweep's plot shows for a PIM report, and its reference mark."""
    return {"label": "speedup over CPU-only", "value": report["speedup"],
            "reference": report["baselines"]["oracle"], "reference_label": "oracle"}
