"""Stage ``profile``: per-nest host measurements of the instrumented program.

Timing run (always native, counters off): ``warmup`` forwards, then ``repetitions`` forwards;
per nest the invocations per forward and the median / interquartile range of its time per
forward, and the same for the whole function body (the forward region). ``timing.csv``.

Counter run, one event set, no multiplexing (``counters.csv``), by ``profile.backend``:
``papi`` reads the platform's PAPI events in the C markers; ``valgrind`` replays the forward
under callgrind's cache simulation (``pimbuild.valgrind``); ``timer`` records no counters;
``auto`` takes ``papi`` when the platform's events can be added, else ``valgrind`` (else
``timer``), and says which and why.
"""

from __future__ import annotations

import csv
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pimbuild import jit, lower, valgrind
from pimbuild.errors import StageError
from pimbuild.instrument import FORWARD_REGION
from pimbuild.runtime import LIBRARY, Markers

log = logging.getLogger(__name__)

TIMING_COLUMNS = ["id", "source_op", "source_module", "invocations", "median_s", "iqr_s",
                  "p25_s", "p75_s", "min_s", "max_s", "share"]
# Roles of platform events (conf/platform/*.yaml `events`) that the decision rule reads.
N_RD, C_STORE = "offcore_data_rd", "store_bound"
BACKEND_TERMS = ("backend_stalls", "backend_1port", "backend_2port")
LL_WRITE_MISSES = "ll_write_misses"  # valgrind: last-level data write misses (DLmw)


@dataclass(frozen=True)
class ProfileParams:
    backend: str = "auto"
    repetitions: int = 10
    warmup: int = 2
    events: dict[str, str] = field(default_factory=dict)  # role -> PAPI event name
    cache_line: int = 64
    l1d_bytes: int = 49152
    l1d_assoc: int = 12
    llc_bytes: int = 44040192
    llc_assoc: int = 21


@dataclass
class Inputs:
    """Everything a profile run reads from earlier stages."""

    lower: lower.LowerParams
    signature: dict[str, Any]
    candidates: list[dict[str, Any]]
    llvm_path: Path
    runtime_dir: Path

    @classmethod
    def from_artifacts(cls, lp: lower.LowerParams, lower_dir: Path, extract_dir: Path,
                       instrument_dir: Path, runtime_dir: Path) -> Inputs:
        return cls(lower=lp, signature=json.loads((lower_dir / "signature.json").read_text()),
                   candidates=json.loads((extract_dir / "candidates.json").read_text())[
                       "candidates"],
                   llvm_path=instrument_dir / "llvm.mlir", runtime_dir=runtime_dir)


def _quartiles(samples: np.ndarray) -> tuple[float, float, float]:
    p25, p50, p75 = np.percentile(samples, [25, 50, 75])
    return float(p25), float(p50), float(p75)


def timing_run(engine, markers: Markers, inp: Inputs, args: list[np.ndarray],
               p: ProfileParams) -> tuple[list[dict], dict[str, float]]:
    """Per-nest and forward times over the repetitions (seconds per forward)."""
    n = len(inp.candidates)
    samples, invocations = [], None
    for rep in range(p.warmup + p.repetitions):
        markers.reset()
        jit.invoke(engine, inp.signature["function"], args, inp.signature["outputs"])
        if rep >= p.warmup:
            samples.append(markers.seconds(FORWARD_REGION + 1).copy())
            invocations = markers.counts(n)
    times = np.array(samples)  # [repetitions, regions]
    forward = times[:, FORWARD_REGION]
    f25, f50, f75 = _quartiles(forward)
    rows = []
    for c in inp.candidates:
        p25, p50, p75 = _quartiles(times[:, c["id"]])
        rows.append({"id": c["id"], "source_op": c["source_op"],
                     "source_module": c["source_module"],
                     "invocations": int(invocations[c["id"]]), "median_s": p50,
                     "iqr_s": p75 - p25, "p25_s": p25, "p75_s": p75,
                     "min_s": float(times[:, c["id"]].min()),
                     "max_s": float(times[:, c["id"]].max()), "share": p50 / f50})
    nest_total = float(np.median(times[:, :n].sum(axis=1)))
    summary = {"forward_median_s": f50, "forward_iqr_s": f75 - f25,
               "coverage": nest_total / f50, "repetitions": p.repetitions,
               "warmup": p.warmup}
    return rows, summary


def write_csv(path: Path, columns: list[str], rows: list[dict]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def derived(counts: dict[str, float], t_cpu_s: float, cache_line: int,
            b_cpu_gbps: float) -> dict[str, Any]:
    """C3's read bandwidth and C4's store-bound fraction from whatever roles were counted."""
    out: dict[str, Any] = {"bw_read_gbps": "", "store_bound": ""}
    if N_RD in counts and t_cpu_s > 0:
        out["bw_read_gbps"] = counts[N_RD] * cache_line / t_cpu_s / 1e9
    if C_STORE in counts and all(t in counts for t in BACKEND_TERMS):
        backend = counts[C_STORE] + sum(counts[t] for t in BACKEND_TERMS)
        out["store_bound"] = counts[C_STORE] / backend if backend > 0 else 0.0
    elif LL_WRITE_MISSES in counts and t_cpu_s > 0:  # valgrind's proxy
        write_gbps = counts[LL_WRITE_MISSES] * cache_line / t_cpu_s / 1e9
        out["store_bound"] = min(1.0, write_gbps / b_cpu_gbps)
    return out


def papi_run(engine, markers: Markers, inp: Inputs, args: list[np.ndarray],
             p: ProfileParams) -> list[dict]:
    """One forward with the platform's events in one PAPI event set."""
    roles, names = list(p.events), list(p.events.values())
    n_events, reason = markers.papi_start(names)
    if n_events < 0:
        raise StageError("profile", f"PAPI cannot count {names}: {reason}")
    try:
        markers.reset()
        jit.invoke(engine, inp.signature["function"], args, inp.signature["outputs"])
        values = markers.values(len(inp.candidates), n_events)
    finally:
        markers.papi_stop()
    return [{"id": c["id"], "source_op": c["source_op"], "counter_source": "papi",
             "counts": {role: int(values[c["id"], i]) for i, role in enumerate(roles)}}
            for c in inp.candidates]


def choose_backend(p: ProfileParams, markers: Markers) -> tuple[str, str]:
    """The counter backend to use and why (``auto`` probes PAPI with the platform events)."""
    if p.backend != "auto":
        return p.backend, f"profile.backend={p.backend}"
    n, reason = markers.papi_start(list(p.events.values())) if p.events else (-1, "no events")
    markers.papi_stop()
    status = markers.perf_event_status()
    if n < 0 and status:
        reason += f"; PAPI's perf_event component is disabled: {status}"
    if n > 0:
        return "papi", f"PAPI counts the platform events {list(p.events.values())}"
    if valgrind.available():
        return "valgrind", f"PAPI cannot count the platform events: {reason}"
    return "timer", f"PAPI cannot count the platform events: {reason}; valgrind not found"


def counter_run(backend: str, engine, markers: Markers, inp: Inputs, args: list[np.ndarray],
                p: ProfileParams, out_dir: Path) -> list[dict]:
    if backend == "papi":
        return papi_run(engine, markers, inp, args, p)
    if backend == "valgrind":
        return valgrind.counter_rows(inp, args, p, out_dir)
    return [{"id": c["id"], "source_op": c["source_op"], "counter_source": "timer",
             "counts": {}} for c in inp.candidates]


def counters_table(rows: list[dict], timing: list[dict], cache_line: int,
                   b_cpu_gbps: float) -> tuple[list, list]:
    """counters.csv columns and rows: raw counts by role, T_cpu, and the derived metrics."""
    # T_cpu(r): the nest's time per forward, accumulated over its invocations (timing run);
    # the counts are per forward too (one counted forward).
    t_cpu = {r["id"]: r["median_s"] for r in timing}
    roles = sorted({role for r in rows for role in r["counts"]})
    table = []
    for r in rows:
        t = t_cpu[r["id"]]
        table.append({"id": r["id"], "source_op": r["source_op"],
                      "counter_source": r["counter_source"],
                      **{f"event:{role}": r["counts"].get(role, "") for role in roles},
                      "t_cpu_s": t, **derived(r["counts"], t, cache_line, b_cpu_gbps)})
    columns = ["id", "source_op", "counter_source", *[f"event:{role}" for role in roles],
               "t_cpu_s", "bw_read_gbps", "store_bound"]
    return columns, table


def run(inp: Inputs, p: ProfileParams, b_cpu_gbps: float, out_dir: Path) -> None:
    """Write ``timing.csv``, ``counters.csv`` and ``profile.json``."""
    markers = Markers(inp.runtime_dir / LIBRARY)
    engine = jit.load_llvm(inp.llvm_path, markers.symbols)
    args, _ = lower.materialize(inp.lower, inp.signature)
    rows, summary = timing_run(engine, markers, inp, args, p)
    write_csv(out_dir / "timing.csv", TIMING_COLUMNS, rows)
    backend, why = choose_backend(p, markers)
    log.info("counter backend: %s (%s)", backend, why)
    counter_rows = counter_run(backend, engine, markers, inp, args, p, out_dir)
    columns, table = counters_table(counter_rows, rows, p.cache_line, b_cpu_gbps)
    write_csv(out_dir / "counters.csv", columns, table)
    (out_dir / "profile.json").write_text(json.dumps(
        {**summary, "counter_backend": backend, "counter_backend_reason": why,
         "requested_backend": p.backend}, indent=2) + "\n")
