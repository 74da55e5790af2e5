"""What the kernel-time model costs (not a test): one fit on all the measured rows (no band),
predicting 10,000 ops from an ops CSV through ``pimbuild-kernels predict``, and the GPU
target's main command cold with today's default (measured engine kernels, ``auto``) against
the previous one (fitted times of the lowered kernels), alternately.

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
                                                        for _ in range(3)), "", ""])
        elif op in ops.ATTENTION:
            g = 2 ** rng.randint(0, 3)
            n = 2 ** rng.randint(4, 14)
            m = 1 if op == "decode_attention" else min(n, 2 ** rng.randint(0, 12))
            rows.append([op, dtype, 2 ** rng.randint(0, 8), m, n, 128, g * 4, g])
        else:
            rows.append([op, dtype, 2 ** rng.randint(0, 14), "", "", "", 2 ** rng.randint(4, 14),
                         ""])
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("outputs/bench"))
    args = ap.parse_args()
    result: dict = {}
    began = time.perf_counter()
    rows = sources.load() + sources.engine_rows(sources.load_engine())
    gpus = sources.devices()
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
        variants = {"previous": ["gpus.backend=fitted", "gpus.kernels=lowered"],
                    "auto": []}
        times: dict[str, list[float]] = {v: [] for v in variants}
        for _ in range(args.rounds):  # alternately, each in a fresh store (cold)
            for name, overrides in variants.items():
                store = Path(tmp) / f"store-{name}"
                shutil.rmtree(store, ignore_errors=True)
                began = time.perf_counter()
                subprocess.run([sys.executable, "-m", "pimbuild.commands.cli", *MAIN,
                                f"store={store}",
                                *overrides, "hydra.run.dir=" + str(Path(tmp) / "run")],
                               check=True, capture_output=True)
                times[name].append(time.perf_counter() - began)
        result["main_command_s"] = times
        ratio = [a / p for a, p in zip(times["auto"], times["previous"], strict=True)]
        result["auto_over_previous"] = {"median": statistics.median(ratio),
                                        "min": min(ratio), "max": max(ratio)}
        print(f"main command cold: previous default {times['previous']}, auto {times['auto']}; "
              f"auto / previous median {statistics.median(ratio):.2f} "
              f"({min(ratio):.2f}-{max(ratio):.2f})")
    write_json(args.out / "kernel_model.json", result)


if __name__ == "__main__":
    main()
