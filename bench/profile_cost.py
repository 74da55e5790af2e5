"""Benchmark (not a test): profile stage wall time as a multiple of one native forward.

    .venv/bin/python bench/profile_cost.py [model ...] [--json out.json]
    .venv/bin/python bench/profile_cost.py --decisions-only [model ...]   # the second part
    .venv/bin/python bench/profile_cost.py --decisions-only hf --set model.hf.arch=BertModel

For each model and counter backend, a fresh store is built up to ``profile``; the profile
stage's seconds (doit's, around its action) are divided by the forward's median time from the
same run's timing. A backend this host cannot use is reported with its reason. The stage's
own split (``profile.json`` ``seconds``: load, arguments, timing, counters) is listed as
multiples of the forward too.

Then, per model, whether the ``footprint`` backend's counts lead to the decisions
``valgrind``'s do: one build up to ``decide`` with valgrind, and the same run's timing with
counters.csv derived from footprint's counts instead; the policy decides on each, so only
the counts differ. Reported: nests decided differently (and by which condition), and the
read misses of the two backends over the nests that reach stage 2.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import tempfile
from pathlib import Path

from common import quiet_build, write_json
from hydra import compose, initialize_config_module
from rich.table import Table

from pimbuild.build.config import register_configs
from pimbuild.commands.cli import CONFIG_MODULE
from pimbuild.core.console import console
from pimbuild.core.errors import PimbuildError
from pimbuild.targets.offload import decide, policies, profile, program
from pimbuild.targets.offload.counters import footprint
from pimbuild.targets.offload.hostfacts import b_cpu

BACKENDS = ("timer", "footprint", "valgrind", "papi")
DEFAULT_MODELS = ["softmax", "gemv", "mlp", "attention", "llama7b", "gptj6b", "mamba"]
EXTRA: list[str] = []  # --set: more overrides for every build


def bench(model: str, backend: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        try:
            _, total = quiet_build([f"model={model}", *EXTRA, f"store={tmp}/store",
                                    "stages=[profile]", f"profile.backend={backend}"],
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


def footprint_decisions(model: str) -> dict:
    """valgrind's and footprint's counts on one run's timing: the decisions each leads to."""
    with tempfile.TemporaryDirectory() as tmp:
        over = [f"model={model}", *EXTRA, f"store={tmp}/store", "stages=[decide]",
                "profile.backend=valgrind"]
        result, _ = quiet_build(over, Path(tmp) / "run")
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            cfg = compose("config", overrides=over)
        dirs = {s: Path(v["dir"]) for s, v in result.manifest["stages"].items()}
        modelled = Path(tmp) / "footprint"
        shutil.copytree(dirs["profile"], modelled)
        rewrite_counters(modelled, dirs["extract"], dirs["instrument"], profile.params(cfg),
                         b_cpu(dirs["calibrate"]))
        p = decide.params(cfg)
        decided, n_rd = {}, {}
        for name, profile_dir in (("valgrind", dirs["profile"]), ("footprint", modelled)):
            ctx = decide.context({**dirs, "profile": profile_dir}, p)
            decided[name] = {d.id: d for d in policies.place(p.policy.name, ctx).decisions}
            with (profile_dir / "counters.csv").open() as counters:
                n_rd[name] = {int(r["id"]): float(r["event:offcore_data_rd"])
                              for r in csv.DictReader(counters)}
    v, f = decided["valgrind"], decided["footprint"]
    stage2 = [k for k, d in v.items() if d.decided_by not in ("C1", "C2")]
    return {"model": " ".join([model, *EXTRA]), "nests": len(v), "stage2": len(stage2),
            "differ": [{"id": k, "valgrind": f"{v[k].target} ({v[k].decided_by})",
                        "footprint": f"{f[k].target} ({f[k].decided_by})"}
                       for k in v if v[k].target != f[k].target],
            **{f"rd_{name}": sum(n_rd[name][k] for k in stage2) for name in n_rd}}


def rewrite_counters(profile_dir: Path, extract_dir: Path, instrument_dir: Path,
                     p: profile.Params, b_cpu_gbps: float) -> None:
    """counters.csv from footprint's counts and the timing already in ``profile_dir``."""
    candidates = program.nest_candidates(extract_dir, instrument_dir)
    rows = footprint.rows(candidates, p)
    timing = [{"id": int(r["id"]), "t_cpu_s": float(r["t_cpu_s"])}
              for r in csv.DictReader((profile_dir / "timing.csv").open())]
    columns, table = profile.counters_table(rows, timing, p.cache_line, b_cpu_gbps)
    profile.write_csv(profile_dir / "counters.csv", columns, table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("models", nargs="*", default=DEFAULT_MODELS)
    parser.add_argument("--json", type=Path, default=Path("outputs/bench/profile_cost.json"))
    parser.add_argument("--decisions-only", action="store_true",
                        help="only footprint's decisions against valgrind's (no cost table)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="another override for every build (model.hf.arch=BertModel)")
    args = parser.parse_args()
    EXTRA.extend(args.set)
    register_configs()
    rows = [] if args.decisions_only else cost_rows(args.models)
    same = [footprint_decisions(m) for m in args.models]
    decisions_table(same)
    write_json(args.json, {"cost": rows, "decisions": same})


def cost_rows(models: list[str]) -> list[dict]:
    """The profile stage's cost per model and backend, printed as a table."""
    bench("relu", "timer")  # one-off process warm-up, not reported
    rows = [bench(m, b) for m in models for b in BACKENDS]
    table = Table(title="profile stage cost (one thread; noisy VM: compare within a run)")
    for col in ("model", "backend", "forward ms", "profile s", "profile / forward",
                "load", "arguments", "timing", "counters"):
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
                        for k in ("load", "arguments", "timing", "counters")])
    console.print(table)
    for backend, error in errors.items():
        console.print(f"{backend} n/a: {error}", soft_wrap=True)
    return rows


def decisions_table(same: list[dict]) -> None:
    table = Table(title="footprint vs valgrind counts, one run's timing: the policy's decisions")
    for col in ("model", "nests", "reach stage 2", "decided differently",
                "read misses at stage 2, footprint / valgrind"):
        table.add_column(col, justify="left" if col == "model" else "right")
    for r in same:
        table.add_row(r["model"], str(r["nests"]), str(r["stage2"]),
                      ", ".join(f"{d['id']}: {d['valgrind']} -> {d['footprint']}"
                                for d in r["differ"]) or "none",
                      f"{r['rd_footprint'] / r['rd_valgrind']:.3f}" if r["rd_valgrind"]
                      else "-")
    console.print(table)


if __name__ == "__main__":
    main()
