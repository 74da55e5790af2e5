"""The paper's qualitative results on this host (not a test): every recipe, torchpim at
32/64/128 PIM cores, with the operator-level and oracle baselines.

    .venv/bin/python bench/paper_results.py [model ...] [--store DIR] [--json out.json]

Uses one artifact store (default outputs/artifacts), so a rerun reuses everything.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from common import quiet_build, write_json
from rich.table import Table

from pimbuild.build.config import register_configs
from pimbuild.core.console import console

MODELS = ["ew_add", "copying", "scale", "zeroing", "relu", "silu", "gelu", "tanh", "softmax",
          "layernorm", "rmsnorm", "mac", "gemv", "matmul", "depthwise_conv", "attention", "mlp"]


def run(model: str, store: Path, run_dir: Path) -> dict:
    result, _ = quiet_build([f"model={model}", f"store={store}"], run_dir / model)
    r = json.loads((Path(result.manifest["stages"]["simulate"]["dir"]) / "report.json")
                   .read_text())
    by = Counter(n["decided_by"] for n in r["nests"])
    sweep = {row["cores"]: row for row in r["sweep"]}
    return {"model": model, "nests": len(r["nests"]), "offloaded": r["offloaded"],
            "decided_by": dict(by), "captured": r["captured_share_of_cpu_time"],
            **{f"torchpim@{c}": sweep[c]["torchpim"]["speedup"] for c in sweep},
            **{f"oracle@{c}": sweep[c]["oracle"]["speedup"] for c in sweep},
            "operator@128": sweep[128]["operator"]["speedup"],
            "accuracy": r["agreement"]["accuracy"], "agree": r["agreement"]["agree"],
            "forward_ms": r["t_cpu_only_s"] * 1e3, "theta_gbps": r["theta_gbps"],
            "nest_rows": [{k: n[k] for k in ("id", "source_op", "target", "decided_by",
                                             "bw_read_gbps", "store_bound", "beneficial")}
                          for n in r["nests"]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="*", default=MODELS)
    parser.add_argument("--store", type=Path, default=Path("outputs/artifacts"))
    parser.add_argument("--json", type=Path, default=Path("outputs/bench/paper_results.json"))
    args = parser.parse_args()
    register_configs()
    rows = []
    for m in args.models:
        rows.append(run(m, args.store.resolve(), Path("outputs/bench/runs").resolve()))
        console.print(f"{m}: done")
    table = Table(title="torchpim speedup over CPU-only on this host's profile")
    for col in ("model", "offloaded", "decided by", "captured", "32", "64", "128",
                "operator@128", "oracle@128", "agree"):
        table.add_column(col, justify="left" if col in ("model", "decided by") else "right")
    for r in rows:
        table.add_row(r["model"], f"{len(r['offloaded'])}/{r['nests']}",
                      " ".join(f"{k}:{v}" for k, v in sorted(r["decided_by"].items())),
                      f"{r['captured']:.0%}", *[f"{r[f'torchpim@{c}']:.2f}"
                                                for c in (32, 64, 128)],
                      f"{r['operator@128']:.2f}", f"{r['oracle@128']:.2f}",
                      f"{r['agree']}/{r['nests']}")
    console.print(table)
    total = sum(r["nests"] for r in rows)
    agree = sum(r["agree"] for r in rows)
    console.print(f"agreement with the simulated ground truth over all nests: {agree}/{total}")
    write_json(args.json, rows)


if __name__ == "__main__":
    main()
