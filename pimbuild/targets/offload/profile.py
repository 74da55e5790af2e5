"""Stage ``profile``: per-nest host measurements of the instrumented program.

Timing run (always native, counters off): ``warmup`` forwards, then ``repetitions`` forwards;
per nest the invocations per forward and the median / interquartile range of its time per
forward, and the same for the whole function body (the forward region). ``timing.csv``.
With ``profile.reuse_memory`` (the default) the forwards run in the steady state of a process
that serves the model again and again: freed buffers are reused, not mapped afresh and faulted
in page by page (``reuse_freed_memory``); ``profile.json`` records the minor page faults per
timed forward.

Counter run, one event set, no multiplexing (``counters.csv``), by ``profile.backend``, a
backend of ``pimbuild.targets.offload.counters.BACKENDS`` (``papi``, ``valgrind``,
``timer``); ``auto`` takes
the first of ``profile.auto`` that is available on this host and says why.
"""

from __future__ import annotations

import csv
import ctypes
import json
import logging
import os
import platform
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from pimbuild import frontend
from pimbuild.codegen.runtime import LIBRARY, MALLOPT, Markers
from pimbuild.core.errors import ConfigError
from pimbuild.core.stage import Inputs, plain
from pimbuild.frontend.lower import model_params
from pimbuild.targets.offload.counters import BACKENDS, CounterRun
from pimbuild.targets.offload.hostfacts import b_cpu
from pimbuild.targets.offload.instrument import ENTER, EXIT, FORWARD_REGION
from pimbuild.targets.offload.program import Params, Program

log = logging.getLogger(__name__)

NAME = "profile"
READS = ("lower", "extract", "runtime", "instrument", "calibrate")
WRITES = ("timing.csv", "counters.csv", "profile.json")
TIMING_COLUMNS = ["id", "source_op", "source_module", "invocations", "t_cpu_s", "median_s",
                  "iqr_s", "p25_s", "p75_s", "min_s", "max_s", "share"]
# profile.estimator: T_cpu from the repetitions. The minimum is the run least disturbed by
# the rest of the machine (the usual choice for timing on a shared host); the spread is
# recorded beside it either way.
MAX_REPETITIONS = 10_000
ESTIMATORS = {
    "min": lambda t: float(np.min(t)),
    "p25": lambda t: float(np.percentile(t, 25)),
    "median": lambda t: float(np.median(t)),
}
# Roles of platform events (pimbuild/conf/platform/*.yaml `events`) that the decision rule reads.
N_RD, C_STORE = "offcore_data_rd", "store_bound"
BACKEND_TERMS = ("backend_stalls", "backend_1port", "backend_2port")
LL_WRITE_MISSES = "ll_write_misses"  # valgrind: last-level data write misses (DLmw)
_reused: list[str] = []  # what reuse_freed_memory did in this process, once it has run


def host_cpu() -> str:
    """The host's CPU model, with its family and model numbers where the kernel gives them
    (a VM's "AMD EPYC" names Zen 3 and Zen 5 hosts alike, 17 and 36 GB/s of B_cpu here):
    measurements made on one host are not reused on another."""
    try:
        fields = dict(line.split(":", 1) for line in
                      Path("/proc/cpuinfo").read_text().split("\n\n")[0].splitlines()
                      if ":" in line)
    except OSError:
        fields = {}
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    if "model name" not in fields:
        return platform.processor() or platform.machine()
    numbers = [f"{label} {fields[k]}" for k, label in (("cpu family", "family"),
                                                        ("model", "model")) if fields.get(k)]
    return f"{fields['model name']} ({', '.join(numbers)})" if numbers else fields["model name"]


def params(cfg: DictConfig) -> Params:
    pr, pf = cfg.profile, cfg.platform
    for name in [pr.backend, *pr.auto] if pr.backend == "auto" else [pr.backend]:
        if name != "auto":
            BACKENDS.check(name)
    if pr.valgrind_last_level not in ("llc", "l2"):
        raise ConfigError(f"profile.valgrind_last_level '{pr.valgrind_last_level}' is not one "
                          f"of llc, l2")
    options = plain(pr.backend_options)
    if options and pr.backend == "auto":
        raise ConfigError(f"profile.backend_options ({', '.join(options)}) are one backend's "
                          f"own: name it (profile.backend=NAME), not auto")
    if pr.estimator not in ESTIMATORS:
        raise ConfigError(f"profile.estimator '{pr.estimator}' is not one of "
                          f"{', '.join(ESTIMATORS)}")
    return Params(model=model_params(cfg), backend=pr.backend, auto=tuple(pr.auto),
                  repetitions=pr.repetitions, min_time_s=pr.min_time_s, warmup=pr.warmup,
                  estimator=pr.estimator,
                  events=plain(pf.events),
                  cache_line=pf.cache_line, l1d_bytes=pf.l1d_bytes, l1d_assoc=pf.l1d_assoc,
                  llc_bytes=pf.llc_bytes, llc_assoc=pf.llc_assoc, l2_bytes=pf.l2_bytes,
                  l2_assoc=pf.l2_assoc, valgrind_last_level=pr.valgrind_last_level,
                  valgrind_warm=pr.valgrind_warm, host=host_cpu(),
                  reuse_memory=pr.reuse_memory,
                  backend_options=BACKENDS.values(pr.backend, options))


def reuse_freed_memory() -> str:
    """Have this process's allocator keep the memory a forward frees for the next forward's
    buffers; returns what it did. glibc serves a request past its mmap threshold (128 KiB,
    raised as such blocks are freed, to 32 MiB at most) with pages mapped for it alone and
    unmapped at ``free``, so each forward's large buffers (a 1020-token prefill's attention
    scores, 133 MB) are faulted in again page by page by the nest that first writes them: a
    fill then runs at 1.7 GB/s, on every forward, in the lowered program and in eager
    PyTorch alike (docs/design.md §8). With mmap off for large blocks (``M_MMAP_MAX`` 0) and
    the heap never trimmed (``M_TRIM_THRESHOLD`` -1), freed blocks stay in the heap for the
    next forward, as a serving process's allocator would keep them. One arena
    (``M_ARENA_MAX`` 1): after a request it cannot meet (PyTorch asked for petabytes, say)
    glibc moves the thread to another arena, which mmaps large blocks whatever
    ``M_MMAP_MAX`` says. Process-wide, for PyTorch in this process too, and not undone."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return "unchanged: the C library has no mallopt"
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    if not all(mallopt(param, value) for _, param, value in MALLOPT):
        return "unchanged: mallopt refused the settings"
    settings = ", ".join(f"{name} {value}" for name, _, value in MALLOPT)
    _reused[:] = [f"freed memory reused (mallopt: {settings})"]
    return _reused[0]


def memory_state(reuse: bool) -> str:
    """``profile.json``'s ``memory``: what ``reuse_freed_memory`` did, or with ``reuse``
    off, that this stage left the allocator alone, and whether an earlier build in this
    process had already changed it (which cannot be undone)."""
    if reuse:
        return reuse_freed_memory()
    if _reused:
        return f"not changed by this stage; an earlier build in this process: {_reused[0]}"
    return "not changed by this stage"


def minor_faults() -> int:
    """This process's minor page faults so far."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def load_program(program: Program, markers) -> tuple[Any, str]:
    """The instrumented forward ready to run, and how it was loaded: ``forward.o``, which
    instrument compiled, linked into a shared library against ``markers``' runtime; or, where
    the host's linker or loader refuses that, ``llvm.mlir`` compiled again."""
    from pimbuild.codegen import jit

    linked, why = jit.try_load_object(program.object_path, [markers.path])
    if linked is not None:
        return linked, "forward.o linked as a shared library"
    log.warning("could not load forward.o (%s); compiling llvm.mlir again", why)
    engine = jit.load_llvm(program.llvm_path, markers.symbols([ENTER, EXIT]))
    engine.lookup(program.signature["function"])  # LLVM generates the code here
    return engine, f"llvm.mlir compiled again ({why})"


def _quartiles(samples: np.ndarray) -> tuple[float, float, float]:
    p25, p50, p75 = np.percentile(samples, [25, 50, 75])
    return float(p25), float(p50), float(p75)


def timing_run(engine, markers, inp: Program, args: list[np.ndarray], warmup: int,
               repetitions: int, estimator: str, min_time_s: float = 0.0
               ) -> tuple[list[dict], dict[str, Any]]:
    """Per-nest and forward times over the repetitions (seconds per forward): ``t_cpu_s``
    by the estimator, and the quartiles and extremes that show the spread. At least
    ``repetitions`` forwards are timed, and more until they add up to ``min_time_s`` (a short
    forward needs many runs for its low quantiles to settle), at most ``MAX_REPETITIONS``."""
    from pimbuild.codegen import jit

    n = len(inp.candidates)
    samples, invocations = [], None
    call, _ = jit.prepare(engine, inp.signature["function"], args, inp.signature["outputs"])
    for _ in range(warmup):
        call()
    measured, faults = 0.0, minor_faults()
    while len(samples) < repetitions or (measured < min_time_s
                                         and len(samples) < MAX_REPETITIONS):
        markers.reset()
        call()
        seconds = markers.seconds(FORWARD_REGION + 1)
        samples.append(np.append(seconds[:n], seconds[FORWARD_REGION]))  # nests, forward
        measured += samples[-1][n]
        invocations = markers.counts(n)
    repetitions = len(samples)
    faults = (minor_faults() - faults) / repetitions
    times = np.array(samples)  # [repetitions, nests + the forward]
    estimate = ESTIMATORS[estimator]
    forward = times[:, n]
    f25, f50, f75 = _quartiles(forward)
    t_forward = estimate(forward)
    rows = []
    for c in inp.candidates:
        t = times[:, c["id"]]
        p25, p50, p75 = _quartiles(t)
        rows.append({"id": c["id"], "source_op": c["source_op"],
                     "source_module": c["source_module"],
                     "invocations": int(invocations[c["id"]]), "t_cpu_s": estimate(t),
                     "median_s": p50, "iqr_s": p75 - p25, "p25_s": p25, "p75_s": p75,
                     "min_s": float(t.min()), "max_s": float(t.max()),
                     "share": estimate(t) / t_forward})
    nest_total = estimate(times[:, :n].sum(axis=1))
    summary = {"forward_s": t_forward, "estimator": estimator, "forward_median_s": f50,
               "forward_iqr_s": f75 - f25, "forward_min_s": float(forward.min()),
               "coverage": nest_total / t_forward, "repetitions": repetitions,
               "warmup": warmup, "load_average": list(os.getloadavg()),
               "minor_faults_per_forward": faults}
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


def choose_backend(run: CounterRun) -> tuple[str, str]:
    """The counter backend to use and why (``auto``: the first available of ``p.auto``)."""
    p = run.params
    if p.backend != "auto":
        return p.backend, f"profile.backend={p.backend}"
    rejected = []
    for name in p.auto:
        ok, why = BACKENDS.get(name).available(run)
        if ok:
            return name, "; ".join([*rejected, why])
        rejected.append(why)
    raise ConfigError(f"no counter backend of profile.auto {list(p.auto)} is available: "
                      f"{'; '.join(rejected)}")


def counters_table(rows: list[dict], timing: list[dict], cache_line: int,
                   b_cpu_gbps: float) -> tuple[list, list]:
    """counters.csv columns and rows: raw counts by role, T_cpu, and the derived metrics."""
    # T_cpu(r): the nest's time per forward, accumulated over its invocations (timing run);
    # the counts are per forward too (one counted forward).
    t_cpu = {r["id"]: r["t_cpu_s"] for r in timing}
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


def run(inputs: Inputs, p: Params, out: Path) -> None:
    program = Program.from_artifacts(p.model, inputs["lower"], inputs["extract"],
                                     inputs["instrument"], inputs["runtime"])
    profile(program, p, b_cpu(inputs["calibrate"]), out)


def profile(program: Program, p: Params, b_cpu_gbps: float, out: Path) -> None:
    """Write ``timing.csv``, ``counters.csv`` and ``profile.json``."""
    seconds, clock = {}, time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        seconds[name] = time.perf_counter() - clock
        clock = time.perf_counter()

    memory = memory_state(p.reuse_memory)
    markers = Markers(program.runtime_dir / LIBRARY)
    engine, loaded = load_program(program, markers)
    lap("load")
    args = frontend.materialize_args(program.model, program.signature)
    lap("arguments")
    rows, summary = timing_run(engine, markers, program, args, p.warmup, p.repetitions,
                               p.estimator, p.min_time_s)
    write_csv(out / "timing.csv", TIMING_COLUMNS, rows)
    lap("timing")
    counter_run = CounterRun(engine, markers, program, args, p, out)
    backend, why = choose_backend(counter_run)
    counter_run.options = BACKENDS.options(backend, p.backend_options)
    log.info("counter backend: %s (%s)", backend, why)
    counter_rows = BACKENDS.get(backend).count(counter_run)
    lap("counters")
    columns, table = counters_table(counter_rows, rows, p.cache_line, b_cpu_gbps)
    write_csv(out / "counters.csv", columns, table)
    (out / "profile.json").write_text(json.dumps(
        {**summary, "counter_backend": backend, "counter_backend_reason": why,
         "requested_backend": p.backend, "program": loaded, "memory": memory,
         "cpu": p.host, "seconds": seconds}, indent=2) + "\n")
