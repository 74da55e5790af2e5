"""Do two fresh stores reach the same conclusions? (Not a test: about six minutes.)

    .venv/bin/python bench/reproducibility.py [model ...] [--json outputs/bench/repro.json]

Builds every operator recipe and both decoder layers twice, each time in a fresh store (so
B_cpu, every profile and every decision are measured again), alternating the two stores model
by model, and reports per model: the offloaded sets (equal or not), the two speedups and their
relative difference, and B_cpu of each store. Issue 10's target on this VM at rest: the same
decision set everywhere, speedups within 5%, B_cpu within 5%.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from common import quiet_build
from rich.table import Table

from pimbuild.build.config import register_configs
from pimbuild.core.console import console

MODELS = ["ew_add", "copying", "scale", "zeroing", "relu", "silu", "gelu", "tanh", "softmax",
          "layernorm", "rmsnorm", "mac", "gemv", "matmul", "depthwise_conv", "attention", "mlp",
          "llama7b", "gptj6b"]


def run(model: str, store: Path, run_dir: Path) -> dict:
    result, _ = quiet_build([f"model={model}", f"store={store}"], run_dir)
    r = json.loads((Path(result.manifest["stages"]["simulate"]["dir"]) / "report.json")
                   .read_text())
    return {"offloaded": r["offloaded"], "borderline": r["borderline"], "speedup": r["speedup"],
            "b_cpu_gbps": r["b_cpu_gbps"]}


def same_firm_decisions(a: dict, b: dict) -> bool:
    """Equal decision sets once the nests either run flagged borderline are left out."""
    shaky = set(a["borderline"]) | set(b["borderline"])
    return set(a["offloaded"]) - shaky == set(b["offloaded"]) - shaky


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=MODELS)
    parser.add_argument("--json", type=Path, default=Path("outputs/bench/repro.json"))
    args = parser.parse_args()
    register_configs()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        stores = [Path(tmp) / "a", Path(tmp) / "b"]
        for model in args.models:
            a, b = (run(model, s, Path(tmp) / f"{s.name}-{model}") for s in stores)
            rows.append({"model": model, "a": a, "b": b,
                         "same_set": a["offloaded"] == b["offloaded"],
                         "same_firm": same_firm_decisions(a, b),
                         "flips_flagged": sorted(set(a["offloaded"]) ^ set(b["offloaded"]))
                         if same_firm_decisions(a, b) else [],
                         "speedup_diff": abs(a["speedup"] - b["speedup"]) / a["speedup"]})
            console.print(f"{model}: {rows[-1]['same_set']} {rows[-1]['speedup_diff']:.1%}")
    b_cpu = [rows[0]["a"]["b_cpu_gbps"], rows[0]["b"]["b_cpu_gbps"]]
    summary = {"cpu": _cpu(), "load_average": os.getloadavg(), "b_cpu_gbps": b_cpu,
               "b_cpu_diff": abs(b_cpu[0] - b_cpu[1]) / b_cpu[0],
               "same_sets": sum(r["same_set"] for r in rows),
               "same_firm_sets": sum(r["same_firm"] for r in rows), "models": len(rows),
               "max_speedup_diff": max(r["speedup_diff"] for r in rows), "rows": rows}
    table = Table(title=f"two fresh stores on {summary['cpu']}")
    for col in ("model", "offloaded A", "offloaded B", "same", "same w/o borderline",
                "speedup A", "speedup B", "diff"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["model"], str(len(r["a"]["offloaded"])), str(len(r["b"]["offloaded"])),
                      "yes" if r["same_set"] else "NO", "yes" if r["same_firm"] else "NO",
                      f"{r['a']['speedup']:.3f}",
                      f"{r['b']['speedup']:.3f}", f"{r['speedup_diff']:.1%}")
    console.print(table)
    console.print(f"B_cpu {b_cpu[0]:.3g} / {b_cpu[1]:.3g} GB/s ({summary['b_cpu_diff']:.1%} "
                  f"apart); same decision set for {summary['same_sets']}/{len(rows)} models, "
                  f"{summary['same_firm_sets']}/{len(rows)} leaving out borderline decisions; "
                  f"largest speedup difference {summary['max_speedup_diff']:.1%}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(summary, indent=2) + "\n")


def _cpu() -> str:
    from pimbuild.targets.offload.profile import host_cpu

    return host_cpu()


if __name__ == "__main__":
    main()
