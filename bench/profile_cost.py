"""Benchmark (not a test): profile stage wall time as a multiple of one native forward.

    .venv/bin/python bench/profile_cost.py [model ...] [--json out.json]

For each model and counter backend, a fresh store is built up to ``profile``; the profile
stage's seconds (doit's, around its action) are divided by the forward's median time from the
same run's timing. A backend this host cannot use is reported with its reason. The stage's
own split (``profile.json`` ``seconds``: compile, arguments, timing, counters) is listed as
multiples of the forward too.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from common import quiet_build
from rich.table import Table

from pimbuild.config import register_configs
from pimbuild.console import console
from pimbuild.errors import PimbuildError

BACKENDS = ("timer", "valgrind", "papi")
DEFAULT_MODELS = ["softmax", "gemv", "mlp", "attention", "llama7b", "gptj6b"]


def bench(model: str, backend: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            _, total = quiet_build([f"model={model}", f"store={tmp}/store",
                                    "targets=[profile]", f"profile.backend={backend}"],
                                   Path(tmp) / "run")
        except PimbuildError as e:
            return {"model": model, "backend": backend, "error": str(e).splitlines()[0]}
        seconds = json.loads((Path(tmp) / "run" / "build.json").read_text())["seconds"]
        info = json.loads(next((Path(tmp) / "store" / "profile").glob("*/profile.json"))
                          .read_text())
    forward = info["forward_s"]
    return {"model": model, "backend": backend, "forward_s": forward,
            "profile_s": seconds["profile"], "ratio": seconds["profile"] / forward,
            "split": {k: v / forward for k, v in info.get("seconds", {}).items()},
            "build_s": total, "counter_backend": info["counter_backend"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--json", type=Path, default=Path("outputs/bench/profile_cost.json"))
    args = parser.parse_args()
    register_configs()
    bench("relu", "timer")  # one-off process warm-up, not reported
    rows = [bench(m, b) for m in args.models for b in BACKENDS]
    table = Table(title="profile stage cost (one thread; noisy VM: compare within a run)")
    for col in ("model", "backend", "forward ms", "profile s", "profile / forward",
                "compile", "arguments", "timing", "counters"):
        table.add_column(col, justify="left" if col in ("model", "backend") else "right")
    errors = {}
    for r in rows:
        if "error" in r:
            errors.setdefault(r["backend"], r["error"])
            table.add_row(r["model"], r["backend"], "-", "-", "n/a", "", "", "", "")
            continue
        table.add_row(r["model"], r["backend"], f"{r['forward_s'] * 1e3:.3g}",
                      f"{r['profile_s']:.2f}", f"{r['ratio']:,.0f}x",
                      *[f"{r['split'].get(k, 0):,.0f}x"
                        for k in ("compile", "arguments", "timing", "counters")])
    console.print(table)
    for backend, error in errors.items():
        console.print(f"{backend} n/a: {error}", soft_wrap=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=2) + "\n")
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
