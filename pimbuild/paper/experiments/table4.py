"""The paper's Table 4: loop nests the rule offloads per operator as the problem size N varies
(at the configured ``pim.cores``), beside the paper's counts (``pimbuild.paper.TABLE4``) and the
ground truth of our own model (nests that gain when offloaded alone). Points are named
``<operator>_<N>`` (``pimbuild/conf/experiment/table4.yaml``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pimbuild import paper


def rows(results: dict[str, dict[str, Any]], cfg: DictConfig) -> list[dict[str, Any]]:
    out = []
    for point, result in results.items():
        report = result["report"]
        op, _, size = point.rpartition("_")
        n = int(size)
        out.append({"model": op, "N": n, "nests": len(report["nests"]),
                    "paper_nests": paper.TABLE4_NESTS.get(op),
                    "offloaded": len(report["offloaded"]),
                    "paper": paper.TABLE4.get(op, {}).get(n),
                    "beneficial": sum(r["beneficial"] for r in report["nests"]),
                    "agreement": report["agreement"]["accuracy"],
                    "speedup": report["speedup"]})
    return out


def _trend(counts: list[int]) -> str:
    steps = [b - a for a, b in zip(counts, counts[1:], strict=False)]
    if all(s == 0 for s in steps):
        return "size-invariant"
    return "monotone" if all(s >= 0 for s in steps) else "non-monotone"


def summary(rows: list[dict[str, Any]]) -> list[str]:
    stated = [r for r in rows if r["paper"] is not None]
    same = sum(r["offloaded"] == r["paper"] for r in stated)
    lines = [f"offloaded count equal to the paper's at {same}/{len(stated)} points"]
    for op in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == op]
        ours = _trend([r["offloaded"] for r in mine])
        theirs = _trend([r["paper"] for r in mine if r["paper"] is not None])
        lines.append(f"{op}: ours {ours}, paper {theirs}")
    return lines


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    from pimbuild.core.plots import plt, save_figure

    ops = list(dict.fromkeys(r["model"] for r in rows))
    fig, axes = plt.subplots(1, len(ops), figsize=(2.3 * len(ops), 2.8), squeeze=False)
    for ax, op in zip(axes[0], ops, strict=True):
        mine = [r for r in rows if r["model"] == op]
        ax.plot([r["N"] for r in mine], [r["offloaded"] for r in mine], "o-", label="pimbuild")
        stated = [r for r in mine if r["paper"] is not None]
        ax.plot([r["N"] for r in stated], [r["paper"] for r in stated], "s--", label="paper")
        ax.set(xscale="log", title=op, xlabel="N")
    axes[0][0].set_ylabel("nests offloaded")
    axes[0][0].legend(fontsize=7)
    save_figure(fig, path)
