"""Optuna's search against the grid it replaces (not a test): one model, ``policy.theta_ratio``
over a grid of ``--points`` values and by Optuna's TPE in ``--trials`` trials, on one store
(so only decide, reinsert and simulate run per point). Prints the builds each ran, their
seconds and the best speedup each found.

    .venv/bin/python bench/search_vs_grid.py [--model mlp] [--points 8] [--trials 4]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent


def sweep(args: list[str], folder: Path, store: Path) -> tuple[list[dict], float]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "pimbuild.commands.cli", "-m", *args,
                           f"store={store}", f"hydra.sweep.dir={folder}",
                           "show_candidates=false", "platform.calibration_max_spread=0.5"],
                          capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        sys.exit(proc.stdout[-2000:] + proc.stderr[-2000:])
    rows = json.loads((folder / "sweep_summary.json").read_text())
    return rows, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--points", type=int, default=8)
    ap.add_argument("--trials", type=int, default=4)
    ap.add_argument("--low", type=float, default=0.05)
    ap.add_argument("--high", type=float, default=2.0)
    a = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="pimbuild-search-"))
    store = root / "store"
    warm, _ = sweep([f"model={a.model}"], root / "warm", store)  # lower, profile: once
    grid = [a.low + i * (a.high - a.low) / (a.points - 1) for i in range(a.points)]
    g_rows, g_s = sweep([f"model={a.model}",
                         "policy.theta_ratio=" + ",".join(f"{x:.4g}" for x in grid)],
                        root / "grid", store)
    o_rows, o_s = sweep([f"model={a.model}", "hydra/sweeper=optuna",
                         f"hydra.sweeper.n_trials={a.trials}",
                         "hydra.sweeper.direction=maximize", "hydra.sweeper.sampler.seed=0",
                         f"policy.theta_ratio=interval({a.low},{a.high})"], root / "optuna",
                        store)
    best = yaml.safe_load((root / "optuna" / "optimization_results.yaml").read_text())
    for name, rows, s in (("grid", g_rows, g_s), ("optuna", o_rows, o_s)):
        top = max(rows, key=lambda r: r["headline"]["value"])
        print(f"{name:7} {len(rows)} builds in {s:.0f} s; best speedup "
              f"{top['headline']['value']:.3f} at {[o for o in top['overrides'] if 'theta' in o]}")
    print(f"optuna's own best: {best['best_value']:.3f} at {best['best_params']}")


if __name__ == "__main__":
    main()
