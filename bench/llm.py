"""Benchmark of the tool itself on the LLaMA-7B / GPT-J-6B decode layers (not a test).

    .venv/bin/python bench/llm.py [--json outputs/bench/llm.json]
    .venv/bin/python bench/llm.py --forward-only --blocks 1,8,16   # lowered / eager only,
                                                                   # and calibrate's pick

Runs the real command line in fresh temporary stores and reports: per-stage wall time and
peak memory of a cold ``llama7b`` build; a no-op rebuild (median of 3); rebuilds after
changing only ``pim.cores`` (128 -> 120 and 128 -> 64, and whether the offloaded set
changed); an 8-point ``policy.theta_ratio`` sweep (cold store) against the single cold run;
lowered-program / PyTorch-eager forward time per layer on one thread (both timed alternately
in this process, the lowered one compiled with the default code generation); and the
profile stage's time / one native forward. One noisy VM: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import write_json
from rich.table import Table

from pimbuild.core.console import console

PIMBUILD = str(Path(sys.executable).parent / "pimbuild")
THETAS = "0.015,0.03,0.06,0.12,0.24,0.48,0.96,1.92"


def cli(args: list[str], cwd: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (MB, this child and its descendants) of one command. A
    single run gets its own numbered run directory (Hydra's default is per second). Its
    output goes to a file, whose last lines are printed if it fails."""
    if "-m" not in args:
        runs = cwd / "runs"
        args = [*args, f"hydra.run.dir={runs / str(len(list(runs.glob('*'))))}"]
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as log:
        pid = subprocess.Popen([PIMBUILD, *args, "show_candidates=false"], cwd=cwd,
                               stdout=log, stderr=subprocess.STDOUT).pid
        _, status, usage = os.wait4(pid, 0)
        if status != 0:
            log.seek(0)
            tail = "".join(log.readlines()[-40:])
            code = os.waitstatus_to_exitcode(status)
            raise SystemExit(f"pimbuild {' '.join(args)} failed with status {code}; its "
                             f"output ended:\n{tail}")
    return time.perf_counter() - start, usage.ru_maxrss // 1024


def last_run(cwd: Path, model: str) -> Path:
    """The latest single run's directory (see ``cli``)."""
    return max((cwd / "runs").iterdir(), key=lambda p: int(p.name))


def profile_info(cwd: Path, model: str) -> dict:
    """profile.json of the model's latest run, found through its manifest."""
    manifest = json.loads((last_run(cwd, model) / "manifest.json").read_text())
    return json.loads((Path(manifest["stages"]["profile"]["dir"]) / "profile.json").read_text())


def forward_ratio(model: str, calibrate_dir: Path | None, rounds: int = 10,
                  block: int | None = None, overrides: tuple[str, ...] = ()) -> dict:
    """Lowered forward (scf.mlir compiled with the default code generation, no markers; the
    register-blocking factor ``block``, else the config's, else the one calibrate chose on
    this host) and PyTorch eager on one thread, timed alternately in this process by the
    eager stage's ``against_eager``: medians, and the rounds' own ratios' median and quartiles.
    ``overrides``: more config overrides (``model.recipe=...``)."""
    from hydra import compose, initialize_config_module

    from pimbuild.codegen import jit
    from pimbuild.commands.cli import CONFIG_MODULE
    from pimbuild.frontend import lower
    from pimbuild.targets.offload import hostfacts
    from pimbuild.targets.offload.eager import against_eager
    from pimbuild.targets.offload.profile import reuse_freed_memory

    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose("config", overrides=[f"model={model}", *overrides])
    p = lower.params(cfg)
    block = block or hostfacts.resolved_block(cfg.lowering.register_block, calibrate_dir)
    reuse_freed_memory()  # both programs in the steady state the profile stage times
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        lower.lower(p, out, out / "failure")
        signature = json.loads((out / "signature.json").read_text())
        engine = jit.compile_scf(out / "scf.mlir", out / "failure", block)
    r = against_eager(engine, p.model, signature, rounds)
    return {"model": model, "lowered_ms": r["lowered_median_s"] * 1e3,
            "eager_ms": r["eager_median_s"] * 1e3, "ratio": r["ratio"],
            "ratio_p25": r["ratio_p25"], "ratio_p75": r["ratio_p75"], "register_block": block}


def offloaded(cwd: Path, model: str) -> list[int]:
    """The offloaded nests of the model's latest run."""
    manifest = json.loads((last_run(cwd, model) / "manifest.json").read_text())
    decide_dir = Path(manifest["stages"]["decide"]["dir"])
    return json.loads((decide_dir / "decisions.json").read_text())["offloaded"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", type=Path, default=Path("outputs/bench/llm.json"))
    parser.add_argument("--forward-only", action="store_true",
                        help="only the lowered / eager forward ratio of both layers (no "
                             "valgrind or calibrate needed), at each of --blocks")
    parser.add_argument("--blocks", default="8",
                        help="register-blocking factors for --forward-only (comma-separated)")
    args = parser.parse_args()
    if args.forward_only:
        forward_only(args)
        return
    out: dict = {}
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        cold_dir, sweep_dir = Path(a), Path(b)
        out["cold_s"], out["cold_peak_mb"] = cli(["model=llama7b", "pim.cores=128"], cold_dir)
        out["cold_stages_s"] = json.loads(
            (last_run(cold_dir, "llama7b") / "build.json").read_text())["seconds"]
        before = offloaded(cold_dir, "llama7b")
        noop = [cli(["model=llama7b", "pim.cores=128"], cold_dir)[0] for _ in range(3)]
        out["noop_s"], out["noop_runs_s"] = float(np.median(noop)), noop
        # Target issue 9: <= 1.5 s no-op, <= 2.5 s after a pim.cores change that leaves the
        # offloaded set as it was (reinsert is then a run-cache hit).
        out["cores_change_s"], _ = cli(["model=llama7b", "pim.cores=120"], cold_dir)
        out["cores_change_same_set"] = offloaded(cold_dir, "llama7b") == before
        out["cores_change_64_s"], _ = cli(["model=llama7b", "pim.cores=64"], cold_dir)
        out["cores_change_64_same_set"] = offloaded(cold_dir, "llama7b") == before
        out["sweep_s"], out["sweep_peak_mb"] = cli(
            ["-m", "model=llama7b", f"policy.theta_ratio={THETAS}"], sweep_dir)
        out["sweep_over_cold"] = out["sweep_s"] / out["cold_s"]
        out["profile_over_forward"] = (out["cold_stages_s"]["profile"]
                                       / profile_info(cold_dir, "llama7b")["forward_s"])
        calibrated = Path(json.loads((last_run(cold_dir, "llama7b") / "manifest.json")
                                     .read_text())["stages"]["calibrate"]["dir"])
        out["forward"] = [forward_ratio("llama7b", calibrated),
                          forward_ratio("gptj6b", calibrated)]
    out["self_peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024

    table = Table(title="pimbuild on a LLaMA-7B decode layer (this host)")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_row("cold build (s)", f"{out['cold_s']:.1f}")
    for stage, s in out["cold_stages_s"].items():
        table.add_row(f"  {stage} (s)", f"{s:.2f}")
    table.add_row("cold build peak RSS (MB)", str(out["cold_peak_mb"]))
    table.add_row("no-op rebuild, median of 3 (s)", f"{out['noop_s']:.2f}")
    for key, cores in (("cores_change", 120), ("cores_change_64", 64)):
        same = "same" if out[f"{key}_same_set"] else "another"
        table.add_row(f"rebuild after pim.cores=128 -> {cores}, {same} offloaded set (s)",
                      f"{out[f'{key}_s']:.2f}")
    table.add_row("8-point theta sweep, cold (s)", f"{out['sweep_s']:.1f}")
    table.add_row("sweep / single cold run", f"{out['sweep_over_cold']:.2f}")
    table.add_row("profile stage / one native forward", f"{out['profile_over_forward']:.0f}x")
    for f in out["forward"]:
        table.add_row(f"{f['model']} lowered / eager forward (1 thread)",
                      f"{f['lowered_ms']:.1f} / {f['eager_ms']:.1f} ms = {f['ratio']:.2f}")
    console.print(table)
    write_json(args.json, out)


def calibrate_search() -> dict:
    """The register-blocking factor calibrate's search picks on this host, with the default
    candidates and calibration size."""
    from hydra import compose, initialize_config_module

    from pimbuild.commands.cli import CONFIG_MODULE
    from pimbuild.targets.offload import calibrate

    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose("config")
    with tempfile.TemporaryDirectory() as tmp:
        return calibrate.search_register_block(tuple(cfg.lowering.register_block_candidates),
                                               cfg.platform.calibration_mib, Path(tmp))


def forward_only(args: argparse.Namespace) -> None:
    """Lowered / eager on one thread for both layers at each register-blocking factor, and
    the CPU it ran on."""
    from pimbuild.targets.offload.profile import host_cpu

    cpu = host_cpu()
    rows = [forward_ratio(model, None, block=int(b))
            for b in args.blocks.split(",") for model in ("llama7b", "gptj6b")]
    search = calibrate_search()
    table = Table(title=f"lowered / eager forward, one thread ({cpu})")
    for col in ("model", "register block", "lowered ms", "eager ms", "ratio",
                "ratio per round (quartiles)"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["model"], str(r["register_block"]), f"{r['lowered_ms']:.1f}",
                      f"{r['eager_ms']:.1f}", f"{r['ratio']:.2f}",
                      f"{r['ratio_p25']:.2f}-{r['ratio_p75']:.2f}")
    console.print(table)
    best = ", ".join(f"{b}: {t * 1e3:.2f}" for b, t in search["best_s"].items())
    console.print(f"calibrate's search on this host chose {search['value']} (best ms: {best})")
    write_json(args.json, {"cpu": cpu, "forward": rows, "search": search})


if __name__ == "__main__":
    main()
