"""Benchmark (not a test): the CPU-only program every speedup divides by, against PyTorch
eager, for each shipped PIM model at its default size, on this host.

    .venv/bin/python bench/host_vs_eager.py [model ...] [--json out.json]

Each model is built in one fresh store (counters from ``footprint``: the comparison does not
need them) and its report read: the ``eager`` stage's comparison (the timed forward and
eager's, alternately, one thread; ``eager.eager_comparison``) and the speedup over
CPU-only and over eager at ``pim.cores`` 128. A ratio above 1 is a model whose host program
is slower than eager, so its speedup over CPU-only is inflated by that much.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from common import quiet_build, write_json
from rich.table import Table

from pimbuild.core.console import console
from pimbuild.core.errors import PimbuildError
from pimbuild.targets.offload.profile import host_cpu

MODELS = ["relu", "ew_add", "scale", "mac", "copying", "zeroing", "gelu", "silu", "tanh",
          "softmax", "layernorm", "rmsnorm", "gemv", "matmul", "mlp", "depthwise_conv",
          "attention", "llama7b", "gptj6b"]


def measure(model: str, store: Path, run_dir: Path) -> dict:
    """One build of ``model``: its report's comparison with eager, or its error line."""
    try:
        result, _ = quiet_build([f"model={model}", "profile.backend=footprint",
                                 f"store={store}"], run_dir)
    except PimbuildError as e:
        return {"model": model, "error": str(e).splitlines()[0]}
    manifest = result.manifest["stages"]
    report = json.loads((Path(manifest["simulate"]["dir"]) / "report.json").read_text())
    over = report["over_eager"]
    return {"model": model, "speedup": report["speedup"], "speedup_over_eager": over["speedup"],
            **{k: v for k, v in over.items() if k != "speedup"}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="*", default=MODELS)
    parser.add_argument("--json", type=Path, default=Path("outputs/bench/host_vs_eager.json"))
    args = parser.parse_args()
    cpu = host_cpu()
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for model in args.models:
            rows.append(measure(model, Path(tmp) / "store", Path(tmp) / model))
            console.print(f"{model}: {rows[-1].get('cpu_only_over_eager', rows[-1].get('error'))}")
    table = Table(title=f"CPU-only program / PyTorch eager, one thread ({cpu})")
    for col in ("model", "lowered ms", "eager ms", "ratio", "quartiles", "rounds",
                "speedup", "over eager"):
        table.add_column(col, justify="right")
    for r in rows:
        if "error" in r:
            table.add_row(r["model"], r["error"], *[""] * 6)
            continue
        table.add_row(r["model"], f"{r['lowered_median_s'] * 1e3:.4g}",
                      f"{r['eager_median_s'] * 1e3:.4g}", f"{r['cpu_only_over_eager']:.2f}",
                      f"{r['ratio_p25']:.2f}-{r['ratio_p75']:.2f}", str(r["rounds"]),
                      f"{r['speedup']:.3f}", f"{r['speedup_over_eager']:.3f}")
    console.print(table)
    write_json(args.json, {"cpu": cpu, "rows": rows})


if __name__ == "__main__":
    main()
