"""The kernel-time model judged on GPUs it was not fitted to: leave-one-GPU-out errors beside
the spec roofline on the same rows, per-layer errors on Vidur's LLaMA-2-7B layers, and
FluidGPU's Fig. 2 question (which GPU runs a kernel faster) on pairs measured on both."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from pimbuild.targets.gpus.kerneltime import model, ops

PREDICTORS = ("roofline", "physics", "fitted")
LAYER_MODEL = "meta-llama/Llama-2-7b-hf"
# Pairs measured on both GPUs: (first, second, source); FluidGPU's Fig. 2 asks how many of the
# first GPU's kernels run faster on the second.
PAIRS = (("A100-PCIe-40GB", "L4", "neusight"), ("A100-SXM-80GB", "A40", "vidur"),
         ("H100-SXM", "A100-SXM-80GB", "vidur"), ("H100-SXM", "A100-PCIe-80GB", "neusight"))


def held_out(rows: list[dict[str, Any]], gpus: dict[str, ops.Gpu], device: str,
             fit: Callable[..., model.KernelModel] = model.fit
             ) -> dict[str, np.ndarray]:
    """``device``'s rows predicted by each predictor, fitted without them."""
    train = [r for r in rows if r["device"] != device]
    test = [r for r in rows if r["device"] == device]
    fitted = fit(train, gpus)
    found = [r["o"] for r in test]
    devs = [gpus[device]] * len(test)
    sources = [r["source"] for r in test]
    return {"measured": np.array([r["time_us"] * 1e-6 for r in test]),
            "roofline": np.array([model.roofline(o, gpus[device]) for o in found]),
            "physics": model.KernelModel(fitted.physics).predict(found, devs, sources),
            "fitted": fitted.predict(found, devs, sources), "rows": test}


def errors(pred: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    e = np.abs(pred / measured - 1)
    return {"median": float(np.median(e)), "mean": float(np.mean(e)),
            "within_20": float(np.mean(e <= 0.2))}


def table(results: dict[str, dict[str, np.ndarray]]) -> list[dict[str, Any]]:
    """Per held-out device, source and family: rows and each predictor's errors."""
    out = []
    for device, res in results.items():
        keys = sorted({(r["source"], r["o"].family) for r in res["rows"]})
        for source, family in keys:
            idx = np.array([r["source"] == source and r["o"].family == family
                            for r in res["rows"]])
            out.append({"device": device, "source": source, "family": family,
                        "rows": int(idx.sum()),
                        **{p: errors(res[p][idx], res["measured"][idx]) for p in PREDICTORS}})
    return out


def layers(results: dict[str, dict[str, np.ndarray]]) -> list[dict[str, Any]]:
    """Per held-out device: the error of each LLaMA-2-7B layer's summed kernels (Vidur)."""
    out = []
    for device, res in results.items():
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(res["rows"]):
            if r["group"].startswith(LAYER_MODEL + "|"):
                groups.setdefault(r["group"], []).append(i)
        if not groups:
            continue
        sums = {p: np.array([res[p][ids].sum() for ids in groups.values()])
                for p in ("measured", *PREDICTORS)}
        out.append({"device": device, "layers": len(groups),
                    **{p: errors(sums[p], sums["measured"]) for p in PREDICTORS}})
    return out


def pairs(results: dict[str, dict[str, np.ndarray]]) -> list[dict[str, Any]]:
    """For each measured pair: on the shapes both measured, the share of kernels faster on the
    second GPU (by count and by the first GPU's time), measured and predicted, and how often
    each predictor picks the measured winner."""
    out = []
    for first, second, source in PAIRS:
        if first not in results or second not in results:
            continue
        sides = []
        for device in (first, second):
            res = results[device]
            index = {}
            for i, r in enumerate(res["rows"]):
                if r["source"] == source:
                    index[r["o"].key() + "|" + r["group"]] = i
            sides.append(index)
        common = sorted(set(sides[0]) & set(sides[1]))
        if not common:
            continue
        a = [sides[0][c] for c in common]
        b = [sides[1][c] for c in common]
        row: dict[str, Any] = {"first": first, "second": second, "source": source,
                               "shapes": len(common)}
        truth = results[second]["measured"][b] < results[first]["measured"][a]
        for p in ("measured", *PREDICTORS):
            t1, t2 = results[first][p][a], results[second][p][b]
            faster = t2 < t1
            row[p] = {"share_by_count": float(faster.mean()),
                      "share_by_time": float(t1[faster].sum() / t1.sum()),
                      "picks_winner": float((faster == truth).mean())}
        out.append(row)
    return out


def pooled(results: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
    """Held-out error of the fitted model per family over every held-out device: the band
    a prediction carries (median and 90th percentile of |predicted / measured - 1|), and
    what ``robust`` draws from: each held-out (device, source) cell's median log error
    ``log(measured / predicted)`` and 41 quantiles of the residuals about those medians."""
    by: dict[str, list[float]] = {}
    cells: dict[str, list[float]] = {}
    residuals: dict[str, list[float]] = {}
    for res in results.values():
        e = np.abs(res["fitted"] / res["measured"] - 1)
        log = np.log(res["measured"] / res["fitted"])
        keys = [(r["source"], r["o"].family) for r in res["rows"]]
        for r, v in zip(res["rows"], e, strict=True):
            by.setdefault(r["o"].family, []).append(float(v))
        for source, fam in sorted(set(keys)):
            idx = np.array([k == (source, fam) for k in keys])
            mid = float(np.median(log[idx]))
            cells.setdefault(fam, []).append(mid)
            residuals.setdefault(fam, []).extend((log[idx] - mid).tolist())
    q = np.linspace(0.025, 0.975, 41)
    return {f: {"median": float(np.median(v)), "p90": float(np.percentile(v, 90)),
                "rows": len(v), "log_bias": cells[f],
                "log_residual": np.quantile(residuals[f], q).round(4).tolist()}
            for f, v in by.items()}
