"""Benchmark (not a test): cold lower + extract wall time per recipe.

    .venv/bin/python bench/lower_extract.py [model ...] [--json out.json]

Each model is built into a fresh temporary store; the per-stage seconds are doit's, measured
around each stage's action. Timings on a shared VM are noisy: compare within one run.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
from pathlib import Path

from common import quiet_build
from rich.table import Table

from pimbuild.build.config import register_configs
from pimbuild.core.console import console

DEFAULT_MODELS = ["gemv", "attention", "mlp", "layernorm", "softmax", "matmul",
                  "depthwise_conv"]


def bench(model: str, extra: tuple[str, ...] = ()) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        _, total = quiet_build([f"model={model}", f"store={tmp}/store", *extra],
                               Path(tmp) / "run")
        seconds = json.loads((Path(tmp) / "run" / "build.json").read_text())["seconds"]
        nests = len(json.loads((Path(tmp) / "store" / "extract").glob("*/candidates.json")
                               .__next__().read_text())["candidates"])
    return {"model": model, "lower_s": seconds["lower"], "extract_s": seconds["extract"],
            "total_s": total, "nests": nests}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--json", type=Path, default=Path("outputs/bench/lower_extract.json"))
    args = parser.parse_args()
    register_configs()
    # The first export in a process pays one-off costs (torch.export / dynamo set-up):
    # measure them on a tiny model, then time every model warm.
    warmup = bench("relu", ("model.size.n=16",))
    console.print(f"process warm-up (relu, n=16, first build): {warmup['total_s']:.2f} s")
    rows = [bench(m) for m in args.models]
    table = Table(title="cold lower + extract (seconds)")
    for col in ("model", "nests", "lower_s", "extract_s", "total_s"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in rows:
        table.add_row(r["model"], str(r["nests"]), f"{r['lower_s']:.2f}",
                      f"{r['extract_s']:.2f}", f"{r['total_s']:.2f}")
    console.print(table)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    console.print(f"peak RSS of this process: {peak_mb:.0f} MB")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    result = {"warmup": warmup, "rows": rows, "peak_rss_mb": peak_mb}
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
