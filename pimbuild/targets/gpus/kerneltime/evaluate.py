"""The kernel-time model judged on GPUs it was not fitted to: leave-one-GPU-out errors beside
the spec roofline on the same rows, per-layer errors on Vidur's LLaMA-2-7B layers, and
FluidGPU's Fig. 2 question (which GPU runs a kernel faster) on pairs measured on both.

Nested in the leave-one-GPU-out runs: for each held-out GPU, whether a family's prediction
takes the learned correction (``chosen``: the fitted model where it beat the physics alone on
the *other* held-out GPUs) and the 80% band its prediction carries (the 10th and 90th
percentiles of the other GPUs' held-out log errors, each GPU weighted alike), so that the
band's coverage on the held-out GPU is a fair test of its calibration."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from pimbuild.targets.gpus.kerneltime import model, ops

PREDICTORS = ("roofline", "physics", "fitted", "chosen")
BAND = (0.1, 0.9)  # the printed band: an 80% interval of the held-out log error
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
    fitted.learned = model.FAMILIES
    pred = fitted.predict(found, devs, sources)
    return {"model": fitted, "measured": np.array([r["time_us"] * 1e-6 for r in test]),
            "roofline": np.array([model.roofline(o, gpus[device]) for o in found]),
            "physics": model.KernelModel(fitted.physics).predict(found, devs, sources),
            "fitted": pred, "chosen": pred, "rows": test}  # chosen: replaced by ``nested``


def _pooled_median(results: dict[str, dict[str, Any]], devices: list[str], family: str,
                   predictor: str) -> float:
    """The median over ``devices`` of each one's median error on ``family``."""
    per = []
    for d in devices:
        idx = np.array([r["o"].family == family for r in results[d]["rows"]])
        if idx.any():
            per.append(np.median(np.abs(results[d][predictor][idx]
                                        / results[d]["measured"][idx] - 1)))
    return float(np.median(per)) if per else math.inf


def choose(results: dict[str, dict[str, Any]], devices: list[str]) -> tuple[str, ...]:
    """The families whose learned correction beat the physics alone on ``devices``."""
    return tuple(f for f in model.FAMILIES
                 if _pooled_median(results, devices, f, "fitted")
                 < _pooled_median(results, devices, f, "physics"))


def _log_errors(res: dict[str, Any], learned: tuple[str, ...]) -> np.ndarray:
    """log(measured / predicted), each family by the fitted model or the physics alone."""
    use = np.array([r["o"].family in learned for r in res["rows"]], dtype=bool)
    pred = np.where(use, res["fitted"], res["physics"]) if len(use) else res["fitted"]
    return np.log(res["measured"] / pred)


def band(results: dict[str, dict[str, Any]], devices: list[str],
         learned: tuple[str, ...]) -> dict[str, dict[str, float]]:
    """Per family, over ``devices``' held-out rows (each device weighted alike): the
    ``BAND`` quantiles of log(measured / predicted) (``low``, ``high``) and the median and
    90th percentile of |predicted / measured - 1|."""
    out = {}
    for f in model.FAMILIES:
        logs, weights = [], []
        for d in devices:
            idx = np.array([r["o"].family == f for r in results[d]["rows"]], dtype=bool)
            if idx.any():
                logs.append(_log_errors(results[d], learned)[idx])
                weights.append(np.full(idx.sum(), 1.0 / idx.sum()))
        if not logs:
            continue
        v, w = np.concatenate(logs), np.concatenate(weights)
        lo, hi = np.quantile(v, BAND, weights=w, method="inverted_cdf")
        e = np.abs(np.exp(-v) - 1)
        out[f] = {"low": float(lo), "high": float(hi), "median": float(np.median(e)),
                  "p90": float(np.percentile(e, 90))}
    return out


def nested(results: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per held-out device: the families it would take the correction for, chosen on the
    other devices, and its rows' predictions under that choice (``chosen``, added to its
    results); per family, the share of its rows inside the band built from the others."""
    out = {}
    for device, res in results.items():
        others = [d for d in results if d != device]
        learned = choose(results, others) if others else model.FAMILIES
        res["chosen"] = res["measured"] / np.exp(_log_errors(res, learned))
        if "model" in res:
            res["model"].learned = learned
        b = band(results, others, learned) if others else {}
        logs = _log_errors(res, learned)
        cover = {}
        for f, q in b.items():
            idx = np.array([r["o"].family == f for r in res["rows"]], dtype=bool)
            if idx.any():
                cover[f] = float(np.mean((logs[idx] >= q["low"]) & (logs[idx] <= q["high"])))
        out[device] = {"learned": list(learned), "coverage": cover}
    return out


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


def pooled(results: dict[str, dict[str, Any]], learned: tuple[str, ...] = model.FAMILIES,
           coverage: dict[str, dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """The band a prediction carries, per family, over every held-out device (``band``), with
    the share of held-out rows the nested bands covered (``coverage``: each device's rows
    against the band of the others, from ``nested``), and what ``robust`` draws from: each
    held-out (device, source) cell's median log error ``log(measured / predicted)`` and 41
    quantiles of the residuals about those medians."""
    cells: dict[str, list[float]] = {}
    residuals: dict[str, list[float]] = {}
    rows: dict[str, int] = {}
    for res in results.values():
        log = _log_errors(res, learned)
        keys = [(r["source"], r["o"].family) for r in res["rows"]]
        for source, fam in sorted(set(keys)):
            idx = np.array([k == (source, fam) for k in keys])
            mid = float(np.median(log[idx]))
            cells.setdefault(fam, []).append(mid)
            residuals.setdefault(fam, []).extend((log[idx] - mid).tolist())
            rows[fam] = rows.get(fam, 0) + int(idx.sum())
    q = np.linspace(0.025, 0.975, 41)
    covered: dict[str, list[float]] = {}
    for per in (coverage or {}).values():
        for f, c in per["coverage"].items():
            covered.setdefault(f, []).append(c)
    return {f: {**b, "rows": rows[f], "log_bias": cells[f],
                "log_residual": np.quantile(residuals[f], q).round(4).tolist(),
                **({"coverage": float(np.mean(covered[f]))} if f in covered else {})}
            for f, b in band(results, list(results), learned).items()}


# Llama-3-8B's layer as vLLM launches it: hidden 4096, 32 query and 8 KV heads of 128, FFN
# 14336; its GEMMs (qkv, o, gate+up, down) and attention, the kernels the measured grids hold
# (its norms, RoPE and SiLU-and-mul are elementwise kernels no public source times on these
# GPUs: they are left out of the sums).
LLAMA3 = ops.Layer(hidden=4096, heads=32, kv_heads=8, head_dim=128, ffn=14336)
PREFILL_TOKENS = (1, 16, 256, 4096)
DECODE = tuple((b, kv) for b in (1, 4, 16, 64, 256) for kv in (1024, 2048, 4096, 8192))
PAPER_FIG2 = {"all_by_count": 0.67, "all_by_time": 0.36, "decode_by_count": 0.57,
              "prefill_by_count": 0.45}


def llama_layer(phase: str, a: int, b: int = 0, dtype: str = "bf16") -> list[ops.Op]:
    """The GEMMs and attention of one Llama-3-8B layer: a prefill of ``a`` tokens, or a
    decode step of ``a`` sequences over ``b`` cached positions."""
    k = LLAMA3.kernels(dtype, a)  # tokens: the prompt's, or one per sequence
    att = LLAMA3.prefill(dtype, a) if phase == "prefill" else LLAMA3.decode(dtype, a, b)
    return [k["qkv_proj"], att, k["o_proj"], k["gate_up_proj"], k["down_proj"]]


def scenarios() -> list[tuple[str, str, list[ops.Op]]]:
    """(phase, label, ops) of every layer the per-layer check sums."""
    return [("prefill", f"prefill {t}", llama_layer("prefill", t)) for t in PREFILL_TOKENS] \
        + [("decode", f"decode b{b} kv{kv}", llama_layer("decode", b, kv)) for b, kv in DECODE]


def measured_times(g: Any, found: list[ops.Op]) -> np.ndarray | None:
    """Each op's time from a measured grid (cold-cache floor applied), None if any misses."""
    out = []
    for o in found:
        hit = g.lookup(o)
        if hit is None:
            return None
        out.append(g.cold(o, hit[0]))
    return np.array(out)


def engine_layers(models: dict[str, Any], grids: dict[str, Any],
                  gpus: dict[str, ops.Gpu]) -> list[dict[str, Any]]:
    """Per held-out GPU with a grid: each Llama-3-8B layer's summed GEMM and attention time,
    measured (the grid) against the roofline, the physics alone and the model fitted without
    that GPU (its nested ``learned`` families); errors over the layers."""
    out = []
    for device, fitted in models.items():
        if device not in grids:
            continue
        sums: dict[str, list[float]] = {p: [] for p in ("measured", "roofline", "physics",
                                                         "chosen")}
        labels = []
        for _, label, found in scenarios():
            truth = measured_times(grids[device], found)
            if truth is None:
                continue
            devs = [gpus[device]] * len(found)
            labels.append(label)
            sums["measured"].append(float(truth.sum()))
            sums["roofline"].append(sum(model.roofline(o, gpus[device]) for o in found))
            sums["physics"].append(float(model.KernelModel(fitted.physics).predict(
                found, devs).sum()))
            sums["chosen"].append(float(fitted.predict(found, devs).sum()))
        if labels:
            truth = np.array(sums["measured"])
            out.append({"device": device, "layers": len(labels),
                        **{p: {**errors(np.array(sums[p]), truth),
                               "max": float(np.max(np.abs(np.array(sums[p]) / truth - 1)))}
                           for p in ("roofline", "physics", "chosen")}})
    return out


def fig2(first: str, second: str, times: Callable[[str, list[ops.Op]], Any],
         only: set[str] | None = None) -> dict[str, dict[str, float]]:
    """FluidGPU's Fig. 2 over the Llama-3-8B layers of ``scenarios`` (those labelled in
    ``only``, if given): the share of kernels faster on ``second``, by count and by
    ``first``'s time, for decode, prefill and all; ``times(device, ops)`` gives seconds
    (None: not known)."""
    shares: dict[str, list[tuple[float, float]]] = {"decode": [], "prefill": []}
    for phase, label, found in scenarios():
        if only is not None and label not in only:
            continue
        a, b = times(first, found), times(second, found)
        if a is None or b is None:
            continue
        shares[phase] += list(zip(a, b, strict=True))
    shares["all"] = shares["decode"] + shares["prefill"]
    out = {}
    for phase, pairs_ in shares.items():
        if pairs_:
            t1 = np.array([p[0] for p in pairs_])
            faster = np.array([p[1] < p[0] for p in pairs_])
            out[phase] = {"kernels": len(pairs_), "by_count": float(faster.mean()),
                          "by_time": float(t1[faster].sum() / t1.sum())}
    return out
