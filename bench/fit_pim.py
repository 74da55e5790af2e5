"""Fit the PIM model's free parameters to the paper's published numbers (issue 13 item 1).

    .venv/bin/python bench/fit_pim.py [--store DIR] [--reuse] [--write-config]

What is fitted and to what: ``pimbuild/paper/fit.py``. Fit half and held-out half:
``pimbuild.paper.FIT_HALF`` / ``HELD_OUT_HALF``. As a check the table also lists Fig. 3's
speedups themselves, predicted with this host's T_cpu (host-dependent: our host is not the
paper's Ice Lake). Host-side data (nests, T_cpu, counters, B_cpu) come from one build per model
up to ``decide`` and are kept in ``outputs/bench/fit_pim/data.json`` (``--reuse`` fits again
from it without building). ``--write-config`` writes
``pimbuild/conf/pim/fitted_paper.yaml`` with the
fit's provenance.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import time
from pathlib import Path
from typing import Any

from pimbuild import paper
from pimbuild.paper.fit import (
    FREE,
    Case,
    case_from_stages,
    fit,
    halves,
    log_errors,
    points,
    predict,
    quantity,
    summary,
)
from pimbuild.targets.offload.nests import Nest
from pimbuild.targets.offload.profile import host_cpu
from pimbuild.targets.pim import PimTarget

OUT = Path("outputs/bench/fit_pim")
CONFIG = Path("pimbuild/conf/pim/fitted_paper.yaml")


def build_case(model: str, store: Path, run_dir: Path) -> tuple[Case, Any]:
    from common import quiet_build

    result, _ = quiet_build([f"model={model}", f"store={store}", "stages=[decide]"],
                            run_dir / model)
    stages = {s: Path(v["dir"]) for s, v in result.manifest["stages"].items()}
    return case_from_stages(model, stages), result


def table(cases, policy, targets: dict[str, PimTarget]) -> list[dict[str, Any]]:
    """The fit's points, then Fig. 3's speedups on this host, under each target."""
    rows = []
    for half, models in halves():
        for m, q, c, v in points(models):
            rows.append({"half": half, "model": m, "quantity": f"{q}@{c}", "paper": v,
                         **{k: quantity(cases[m], policy, t, q, c)
                            for k, t in targets.items()}})
    for half, models in halves():
        for m in models:
            for c, v in sorted(paper.FIG3[m].items()):
                rows.append({"half": half, "model": m, "quantity": f"speedup@{c}",
                             "paper": v, **{k: predict(cases[m], policy, t, c)
                                            for k, t in targets.items()}})
    return rows


def markdown(rows: list[dict[str, Any]], errors: dict[str, Any], meta: dict[str, Any]) -> str:
    names = [k for k in rows[0] if k not in ("half", "model", "quantity", "paper")]
    lines = [f"# PIM model fit to the paper ({meta['cpu']}, {meta['date']})", "",
             f"Fitted: {', '.join(f'{k} = {v:.4g}' for k, v in meta['free'].items())} "
             f"(loss by sync_all: {meta['losses']})", "",
             "| half | model | quantity | paper | " + " | ".join(names) + " |",
             "|---|---|---|---:|" + "---:|" * len(names)]
    lines += [f"| {r['half']} | {r['model']} | {r['quantity']} | {r['paper']:.3f} | "
              + " | ".join(f"{r[n]:.3f}" for n in names) + " |" for r in rows]
    lines += ["", "| model | half | mean abs error | max abs error | RMS log error |",
              "|---|---|---:|---:|---:|"]
    lines += [f"| {n} | {h} | {e['mean_abs_pct']:.1f}% | {e['max_abs_pct']:.1f}% | "
              f"{e['rms_log']:.3f} |" for n, by in errors.items() for h, e in by.items()]
    return "\n".join(lines) + "\n"


def write_config(target: PimTarget, errors: dict[str, Any], meta: dict[str, Any]) -> None:
    fit_err, held_err = errors["fitted"]["fit"], errors["fitted"]["held-out"]
    body = "\n".join(f"{name}: {getattr(target, name):.4g}" for name in FREE)
    body += f"\nsync_all: {str(target.sync_all).lower()}"
    fitted_on = [m for m in paper.FIT_HALF if points((m,))]
    held = [m for m in paper.HELD_OUT_HALF if points((m,))]
    CONFIG.write_text(
        "# The PIM model with its free parameters fitted to what the paper's Fig. 3 and sec. 5.2\n"
        "# say about the PIM side (bench/fit_pim.py; the points: pimbuild.paper.PIM_SIDE).\n"
        "# The other parameters and their sources: pim=default.\n"
        f"# Fitted on {meta['cpu']} ({meta['date']}) to the points of {', '.join(fitted_on)}:\n"
        f"# mean abs error {fit_err['mean_abs_pct']:.1f}% there; on the held-out points of\n"
        f"# {', '.join(held)}: {held_err['mean_abs_pct']:.1f}% (max "
        f"{held_err['max_abs_pct']:.0f}%). The points hold no host time, but\n"
        "# the offloaded sets they are taken over come from this host's profile.\n"
        "defaults:\n  - default\n  - _self_\n\n" + body + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store", type=Path, default=Path("outputs/artifacts"))
    parser.add_argument("--reuse", action="store_true", help="fit from the saved data")
    parser.add_argument("--write-config", action="store_true")
    parser.add_argument("--maxiter", type=int, default=60)
    parser.add_argument("--fix", action="append", default=[], metavar="NAME=VALUE",
                        help="pin a free parameter (e.g. lanes=1), a sensitivity check; "
                             "not with --write-config")
    parser.add_argument("--sync-all", choices=("false", "true", "both"), default="both",
                        help="fit with pim.sync_all false, true, or both and keep the better "
                             "on the fit half")
    args = parser.parse_args()
    from hydra import compose, initialize_config_module

    from pimbuild.build.config import register_configs
    from pimbuild.commands.cli import CONFIG_MODULE
    from pimbuild.core.console import console
    from pimbuild.targets.offload.decide import params

    register_configs()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose("config")
    p = params(cfg)
    policy, base = p.policy, p.target
    OUT.mkdir(parents=True, exist_ok=True)
    data = OUT / "data.json"
    if args.reuse:
        saved = json.loads(data.read_text())
        cases = {m: Case(m, [Nest(**n) for n in c["nests"]], c["forward_s"],
                         set(c["outputs"]), c["b_cpu_gbps"]) for m, c in saved["cases"].items()}
        cpu = saved["cpu"]
    else:
        cases, cpu = {}, host_cpu()
        for m in (*paper.FIT_HALF, *paper.HELD_OUT_HALF):
            cases[m], _ = build_case(m, args.store.resolve(), (OUT / "runs").resolve())
            console.print(f"{m}: {len(cases[m].nests)} nests")
        data.write_text(json.dumps({"cpu": cpu, "cases": {
            m: {"nests": [dataclasses.asdict(n) for n in c.nests], "forward_s": c.forward_s,
                "outputs": sorted(c.outputs), "b_cpu_gbps": c.b_cpu_gbps}
            for m, c in cases.items()}}) + "\n")
    start = time.perf_counter()
    choices = {"false": (False,), "true": (True,), "both": (False, True)}[args.sync_all]
    fixed = {k: float(v) for k, v in (item.split("=", 1) for item in args.fix)}
    unknown = set(fixed) - set(FREE)
    if unknown or (fixed and args.write_config):
        parser.error(f"--fix: free parameters are {', '.join(FREE)}; a pinned fit is not "
                     f"written as the config" if not unknown else f"--fix: unknown {unknown}")
    fits = [fit(cases, policy, dataclasses.replace(base, sync_all=a), points(paper.FIT_HALF),
                maxiter=args.maxiter, fixed=fixed) for a in choices]
    fitted, loss = min(fits, key=lambda f: f[1])
    seconds = time.perf_counter() - start
    targets = {"default": base, "fitted": fitted}
    errors = {name: {half: summary(log_errors(cases, policy, t, points(models)))
                     for half, models in halves()} for name, t in targets.items()}
    meta = {"cpu": cpu, "date": datetime.date.today().isoformat(), "fit_seconds": seconds,
            "fixed": fixed,
            "loss": loss, "losses": {str(f[0].sync_all): f[1] for f in fits},
            "free": {n: getattr(fitted, n) for n in (*FREE, "sync_all")}}
    rows = table(cases, policy, targets)
    name = "fit" + "".join(f"_{k}{v:g}" for k, v in fixed.items())  # fit_lanes1.json, ...
    (OUT / f"{name}.json").write_text(json.dumps({"meta": meta, "errors": errors, "rows": rows},
                                             indent=2) + "\n")
    (OUT / f"{name}.md").write_text(markdown(rows, errors, meta))
    console.print(markdown(rows, errors, meta))
    console.print(f"fitted {meta['free']} in {seconds:.0f} s")
    if args.write_config:
        write_config(fitted, errors, meta)
        console.print(f"wrote {CONFIG}")


if __name__ == "__main__":
    main()
