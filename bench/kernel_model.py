"""What the kernel-time model costs (not a test): one fit on all the measured rows, predicting
10,000 ops from an ops CSV through ``pimbuild-kernels predict``, and the GPU target's main
command cold with the spec roofline against the fitted default, alternately.

    .venv/bin/python bench/kernel_model.py [--rounds 3] [--out outputs/bench]

Writes ``kernel_model.json``.
"""

from __future__ import annotations

import argparse
import csv
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import write_json  # noqa: E402

from pimbuild.targets.gpus.kerneltime import cli, model, ops, sources  # noqa: E402

MAIN = ["system=gpus", "model=llama3_8b", "devices=[a100,l40s]"]


def random_ops(n: int, seed: int = 0) -> list[list]:
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        op = rng.choice(ops.OPS)
        dtype = rng.choice(list(ops.DTYPE_BYTES))
        if op in ops.GEMMS:
            rows.append([op, dtype, rng.randint(1, 16), *(2 ** rng.randint(0, 13)
                                                        for _ in range(3)), ""])
        else:
            rows.append([op, dtype, 2 ** rng.randint(0, 14), "", "", "", 2 ** rng.randint(4, 14)])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("outputs/bench"))
    args = ap.parse_args()
    result: dict = {}
    began = time.perf_counter()
    rows, gpus = sources.load(), sources.devices()
    model.fit(rows, gpus)
    result["fit_s"] = time.perf_counter() - began
    print(f"fit on {len(rows)} rows: {result['fit_s']:.1f} s (load included)")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "ops.csv"
        with src.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(ops.COLUMNS)
            w.writerows(random_ops(10_000))
        began = time.perf_counter()
        cli.main(["predict", str(src), "--device", "l40s"])
        result["predict_10k_s"] = time.perf_counter() - began
        print(f"predict 10,000 ops (read, predict, write): {result['predict_10k_s']:.2f} s")
        times: dict[str, list[float]] = {"roofline": [], "fitted": []}
        for _ in range(args.rounds):  # alternately, each in a fresh store (cold)
            for backend in times:
                store = Path(tmp) / f"store-{backend}"
                shutil.rmtree(store, ignore_errors=True)
                began = time.perf_counter()
                subprocess.run([sys.executable, "-m", "pimbuild.cli", *MAIN, f"store={store}",
                                f"profile.backend={backend}", "hydra.run.dir=" + str(
                                    Path(tmp) / "run")], check=True,
                               capture_output=True)
                times[backend].append(time.perf_counter() - began)
        result["main_command_s"] = times
        ratio = [f / r for f, r in zip(times["fitted"], times["roofline"], strict=True)]
        result["fitted_over_roofline"] = {"median": statistics.median(ratio),
                                          "min": min(ratio), "max": max(ratio)}
        print(f"main command cold: roofline {times['roofline']}, fitted {times['fitted']}; "
              f"fitted / roofline median {statistics.median(ratio):.2f} "
              f"({min(ratio):.2f}-{max(ratio):.2f})")
    write_json(args.out / "kernel_model.json", result)


if __name__ == "__main__":
    main()
