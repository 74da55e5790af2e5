"""The paper's Table 5: what a granularity costs against loop granularity, as percentages of
the end-to-end time under loop granularity, beside the paper's (``pimbuild.paper.TABLE5``).

Levels, all under the same target and the configured copy model except where said:

- ``operator``: the rule applied to each torch operator as a whole (``policy=operator``);
- ``loop``: the rule applied to each nest (the configured policy), consecutive offloaded nests
  merged into one region: the baseline, 100%;
- ``segment``: the loop placement with every offloaded nest its own region (no merging), copies
  by eq. 8 per region. It is the finest split the nests allow: pimbuild does not materialize
  basic blocks (counters are attributed per nest), so the paper's BB level, whose regions are
  finer still (GPT-J: 372 crossings against 18), is bounded from below by this one.

Columns: each term of eq. 9 and the crossings (``N_region``), and the total, each as
``level - loop`` in % of loop's T_hybrid.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pimbuild import paper
from pimbuild.paper import fit
from pimbuild.targets.offload import decide
from pimbuild.targets.offload.simulate import evaluate, placement

TERMS = ("t_host_s", "t_pim_s", "t_copy_s", "t_switch_s")


def unmerged(ctx, offloaded: set[int]) -> dict[str, float]:
    """Eq. 9 with every offloaded nest its own region (upper-bound copies per region)."""
    merged = evaluate(ctx, offloaded)
    t = ctx.target
    fetch = flush = 0
    for n in ctx.nests:
        if n.id in offloaded:
            fetch += max(n.invocations, 1) * sum(n.reads.values())
            flush += max(n.invocations, 1) * sum(n.writes.values())
    n_region = 2 * len(offloaded)
    out = {**merged, "t_copy_s": t.copy_time(fetch, flush),
           "t_switch_s": t.switch_time(n_region), "n_region": n_region}
    out["t_hybrid_s"] = sum(out[k] for k in TERMS)
    return out


def rows(results: dict[str, dict[str, Any]], cfg: DictConfig) -> list[dict[str, Any]]:
    p = decide.params(cfg)
    out = []
    for model, result in results.items():
        case = fit.case_from_stages(model, result["stages"])
        ctx = case.context(p.policy, p.target, p.copy_model)
        loop_set = placement(p.policy.name, ctx)
        sets = {"operator": placement("operator", ctx), "loop": loop_set, "segment": loop_set}
        levels = {"operator": evaluate(ctx, sets["operator"]),
                  "loop": evaluate(ctx, loop_set), "segment": unmerged(ctx, loop_set)}
        base = levels["loop"]["t_hybrid_s"]
        stated = paper.TABLE5.get(model, {})
        for level, b in levels.items():
            theirs = stated.get("bb" if level == "segment" else level, {})
            out.append({
                "model": model, "level": level,
                "offloaded": len(sets[level]),
                "crossings": b["n_region"],
                **{f"d_{k[2:-2]}_pct": (b[k] - levels["loop"][k]) / base * 100
                   for k in TERMS},
                "total_pct": (b["t_hybrid_s"] - base) / base * 100,
                "paper_d_pim_pct": theirs.get("d_pim"), "paper_d_copy_pct": theirs.get("d_copy"),
                "paper_total_pct": theirs.get("total"),
                "paper_crossings": paper.TABLE5_CROSSINGS.get(model, {}).get(
                    "bb" if level == "segment" else level)})
    return out


def summary(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    for r in rows:
        if r["level"] == "loop":
            continue
        paper_total = r["paper_total_pct"]
        theirs = f" (paper {'BB' if r['level'] == 'segment' else r['level']}: " \
                 f"{paper_total:+.1f}%)" if paper_total is not None else ""
        lines.append(f"{r['model']} {r['level']} - loop: {r['total_pct']:+.1f}% of T_hybrid"
                     f"{theirs}, crossings {r['crossings']}")
    return lines


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import numpy as np

    from pimbuild.core.plots import plt, save_figure

    shown = [r for r in rows if r["level"] != "loop"]
    labels = [f"{r['model']}\n{r['level']}" for r in shown]
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(shown)), 3.5))
    x = np.arange(len(shown))
    bottom_pos, bottom_neg = np.zeros(len(shown)), np.zeros(len(shown))
    for term in ("host", "pim", "copy", "switch"):
        v = np.array([r[f"d_{term}_pct"] for r in shown])
        base = np.where(v >= 0, bottom_pos, bottom_neg)
        ax.bar(x, v, bottom=base, label=f"delta T_{term}")
        bottom_pos += np.maximum(v, 0)
        bottom_neg += np.minimum(v, 0)
    stated = [(i, r["paper_total_pct"]) for i, r in enumerate(shown)
              if r["paper_total_pct"] is not None]
    if stated:
        ax.plot(*zip(*stated, strict=True), "k_", ms=18, mew=2, label="paper total")
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel("% of loop-level T_hybrid")
    ax.legend(fontsize=7)
    save_figure(fig, path)
