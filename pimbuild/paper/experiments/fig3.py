"""The paper's Fig. 3: speedup of the rule's placement over CPU-only per model and PIM core
count (the report's ``sim.cores_sweep``) beside every value the paper's text states
(``pimbuild.paper.FIG3``), and the PIM-side quantities the model was fitted to
(``pimbuild.paper.PIM_SIDE``, ``pimbuild.paper.fit``), each with its error and the half of the fit
it belongs to (``fit``: ``pim=fitted_paper`` was fitted to it; ``held-out``: it was not).
Speedups divide by this host's T_cpu; the PIM-side quantities hold no host time."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from pimbuild import paper
from pimbuild.paper import fit
from pimbuild.targets.offload import decide


def half(model: str) -> str:
    if model in paper.FIT_HALF:
        return "fit"
    return "held-out" if model in paper.HELD_OUT_HALF else ""


def _row(model: str, quantity: str, ours: float, theirs: float | None, **extra: Any
         ) -> dict[str, Any]:
    return {"model": model, "quantity": quantity, "half": half(model), "pimbuild": ours,
            "paper": theirs, "error_pct": (ours / theirs - 1) * 100 if theirs else None,
            **extra}


def rows(results: dict[str, dict[str, Any]], cfg: DictConfig) -> list[dict[str, Any]]:
    p = decide.params(cfg)
    speedups, pim_side = [], []
    for model, result in results.items():
        report = result["report"]
        stated = paper.FIG3.get(model, {})
        for row in report["sweep"]:
            chosen = row[report["policy"]]
            speedups.append(_row(model, f"speedup@{row['cores']}", chosen["speedup"],
                                 stated.get(row["cores"]), oracle=row["oracle"]["speedup"],
                                 offloaded=f"{len(chosen['offloaded'])}/{len(report['nests'])}"))
        case = fit.case_from_stages(model, result["stages"])
        for _, q, cores, value in fit.points((model,)):
            ours = fit.quantity(case, p.policy, p.target, q, cores)
            pim_side.append(_row(model, f"{q}@{cores}", ours, value))
    return speedups + pim_side


def errors(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Mean and max absolute error (as a factor, like the fit) per kind of point and half,
    over the points the paper states."""
    out = {}
    for kind in ("pim-side", "speedup"):
        for name in ("fit", "held-out"):
            chosen = [r for r in rows if r["half"] == name and r["paper"]
                      and r["quantity"].startswith("speedup") == (kind == "speedup")]
            # a point with nothing offloaded cannot be matched: a factor-of-e miss, as the fit
            logs = [1.0 if math.isnan(r["pimbuild"]) else abs(math.log(r["pimbuild"] / r["paper"]))
                    for r in chosen]
            if logs:
                out[f"{kind} {name}"] = {
                    "points": len(logs), "mean_abs_pct": math.expm1(np.mean(logs)) * 100,
                    "max_abs_pct": math.expm1(max(logs)) * 100}
    return out


# What the summary's errors are, since the table's ``error_pct`` is another measure.
ERRORS_NOTE = ("errors above are geometric, as the fit reports them: exp(mean |ln(pimbuild / "
               "paper)|) - 1, so half and twice the paper's value are both 100%; the table's "
               "error_pct is pimbuild / paper - 1")


def summary(rows: list[dict[str, Any]]) -> list[str]:
    return [*(f"{name}: {e['points']} points, mean abs error {e['mean_abs_pct']:.1f}%, "
              f"max {e['max_abs_pct']:.0f}%" for name, e in errors(rows).items()), ERRORS_NOTE]


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    from pimbuild.core.plots import plt, save_figure

    fig, ax = plt.subplots(figsize=(5, 4.5))
    stated = [r for r in rows if r["paper"] and r["quantity"].startswith("speedup")]
    for name, marker in (("fit", "o"), ("held-out", "s"), ("", "^")):
        pts = [r for r in stated if r["half"] == name]
        if pts:
            ax.scatter([r["paper"] for r in pts], [r["pimbuild"] for r in pts], marker=marker,
                       label=name or "other")
    values = [v for r in stated for v in (r["paper"], r["pimbuild"])] or [1.0]
    lo, hi = min(values) * 0.8, max(values) * 1.25
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="equal")
    ax.set(xscale="log", yscale="log", xlabel="paper (Fig. 3, as stated)",
           ylabel="pimbuild (this host's T_cpu)", title="Fig. 3 speedup over CPU-only")
    ax.legend()
    save_figure(fig, path)
