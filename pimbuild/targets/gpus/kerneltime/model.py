"""The fitted kernel-time model: an op's time on a GPU from its work and the GPU's spec sheet,
fitted to measured times (``pimbuild.targets.gpus.kerneltime.sources``) and judged on GPUs
left out of the fit.

Three predictors, each a function of an ``ops.Op`` and an ``ops.Gpu``:

- ``roofline``: the spec roofline the GPU target used before
(``pimbuild.targets.gpus.costmodel.roofline``):
  ``launch + max(flops / (peak * eff_engine), bytes / (bw * eff_mem))`` at the config's
  efficiencies (0.7 tensor, 0.5 CUDA cores, 0.8 memory, 2 us launch);
- ``physics``: the same shape with fitted terms: a sustained efficiency per engine (tensor
  cores, CUDA cores) and per memory access family (GEMM, attention, elementwise, row
  reduction), a sustained rate per watt of the board's power limit for CUDA cores (a
  power-capped card, the 72 W L4, cannot hold its spec peak; tensor cores get none,
  ``NO_CAP``), a GEMM's wave quantisation over the SMs (128x128 tiles), and a fixed
  per-kernel floor in SM cycles (so it scales with the clock):
  ``floor_cycles / f + max(waves * flops / min(e_c * peak, k_c * TDP), t_m / e_m)``; plus the
  measurement's own harness (NeuSight's times include eager dispatch; ``harness_us``);
- ``fitted`` (the default): ``physics`` times a learned correction, ``exp(g(x))``, where ``g``
  is a LightGBM regressor on log time ratios over features of the op and where it sits on the
  device (work, shapes, bound times, waves, working set over L2, the ridge point; no absolute
  device numbers and nothing of the software or source that timed it, so that a GPU no source
  has measured gets the same terms as one that is: see ``features``), with samples weighted
  so that every device and family counts alike. The correction applies only to the families
  where leaving each GPU out shows it pays (``learned``, chosen by ``pimbuild-kernels fit``);
  a prediction is never below the spec roofline's bound ``max(flops / peak, bytes / bw)``.

A fit is a JSON file (``fit``, ``save``, ``load``); ``data/kernel_model.json`` is the shipped
one, fitted on every measured device, with its provenance.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from pimbuild.core.errors import ConfigError
from pimbuild.core.schema import Strict, check, number
from pimbuild.targets.gpus.kerneltime import ops, sources

SHIPPED = sources.DATA / "kernel_model.json"
FAMILIES = ("gemm", "attention", "elementwise", "reduction")
HARNESS = {"neusight": "eager dispatch between the events", "vidur": "kernel time",
           "ours": "kernel time", "aiconfigurator": "kernel time", "": "kernel time"}
# The spec roofline's assumptions (pimbuild/conf/gpus/default.yaml): the baseline the fit replaces.
ROOFLINE = {"tensor": 0.7, "cuda": 0.5, "memory": 0.8, "launch_us": 2.0}
GBM_PARAMS = {"objective": "huber", "alpha": 0.3, "learning_rate": 0.05, "num_leaves": 31,
              "min_data_in_leaf": 40, "feature_fraction": 0.8, "bagging_fraction": 0.8,
              "bagging_freq": 1, "lambda_l2": 1.0, "verbose": -1, "num_threads": 2,
              "seed": 0, "deterministic": True}
ROUNDS = 400
# Tensor cores get no power cap: a cap fitted on one generation's boards (TFLOP/s per watt)
# holds the next generation far below what it reaches (a B200 left out of the fit)
NO_CAP = 1e9


# bound and features are pure functions of (op, GPU), asked again for the same rows by every
# fit of a leave-one-GPU-out run: cached (a fit's rows fit well within the bound)
CACHED = 2**19


@functools.lru_cache(maxsize=CACHED)
def bound(o: ops.Op, gpu: ops.Gpu) -> tuple[float, float]:
    """(compute, memory) seconds at the spec sheet's peak rates."""
    flops, moved = o.work()
    peak = gpu.tensor_tflops if o.tensor else gpu.fp32_tflops
    return flops / (peak * 1e12), moved / (gpu.mem_gbps * 1e9)


def roofline(o: ops.Op, gpu: ops.Gpu) -> float:
    """The spec roofline's seconds (the GPU target's previous kernel times)."""
    t_c, t_m = bound(o, gpu)
    eff = ROOFLINE["tensor"] if o.tensor else ROOFLINE["cuda"]
    return ROOFLINE["launch_us"] * 1e-6 + max(t_c / eff, t_m / ROOFLINE["memory"])


@dataclass
class Physics:
    """The fitted physical terms (see the module's docstring)."""
    eff_compute: dict[str, float] = field(default_factory=lambda: {"tensor": 0.7,
                                                                   "cuda": 0.5})
    eff_memory: dict[str, float] = field(default_factory=lambda: dict.fromkeys(FAMILIES, 0.8))

    def __post_init__(self) -> None:  # a fit from before a family existed: the default
        self.eff_memory = {**dict.fromkeys(FAMILIES, 0.8), **self.eff_memory}
    floor_cycles: float = 4000.0
    harness_us: dict[str, float] = field(default_factory=dict)
    # sustained TFLOP/s per watt of the power limit (k_c): no cap where the fit finds none
    tflops_per_w: dict[str, float] = field(default_factory=lambda: {"tensor": 1e9,
                                                                    "cuda": 1e9})

    def seconds(self, found: list[ops.Op], gpus: list[ops.Gpu],
                sources: list[str]) -> np.ndarray:
        """Seconds per op: ``combine`` at these parameters."""
        harness = np.array([self.harness_us.get(s, 0.0) for s in sources]) * 1e-6
        return combine(terms(found, gpus), self.eff_compute, self.tflops_per_w,
                       np.array([self.eff_memory[f] for f in FAMILIES]), self.floor_cycles,
                       harness)


def combine(t: dict[str, np.ndarray], eff_compute: dict[str, Any],
            tflops_per_w: dict[str, Any], eff_memory: np.ndarray, floor_cycles: Any,
            harness: np.ndarray) -> np.ndarray:
    """The physical model over ``terms``: ``floor_cycles / f + max(waves * t_c * slow,
    t_m / e_m) + harness``, ``slow`` the larger of ``1 / e_c`` and the peak over what the
    power limit sustains. One formula for the fit's residuals and for predictions."""
    e_c = np.where(t["tensor"], eff_compute["tensor"], eff_compute["cuda"])
    kappa = np.where(t["tensor"], tflops_per_w["tensor"], tflops_per_w["cuda"])
    slow = np.maximum(1 / e_c, t["peak_per_w"] / kappa)
    return floor_cycles / t["hz"] + np.maximum(t["waves"] * t["t_c"] * slow,
                                               t["t_m"] / eff_memory[t["family"]]) + harness


@functools.lru_cache(maxsize=CACHED)
def features(o: ops.Op, gpu: ops.Gpu) -> tuple[float, ...]:
    """The learned part's inputs: the op's work and shape, and where it sits against the
    device (bound times, waves, working set over L2, intensity over the ridge point), but no
    absolute device numbers: with a dozen GPUs a tree on them learns each GPU's (and each
    harness's) quirks, and ranks GPUs against physics (an H100 ahead of the H200 it shares
    its SMs with on most decode kernels); a device's own rates enter through the physics."""
    t_c, t_m = bound(o, gpu)
    flops, moved = o.work()
    lg = math.log
    rows = o.b * o.m if o.op == "linear" else o.m if o.op in ("bmm", *ops.ATTENTION) else o.b
    inner = o.n if o.op in ops.GEMMS + ops.ATTENTION else o.h
    peak = gpu.tensor_tflops if o.tensor else gpu.fp32_tflops
    return (FAMILIES.index(o.family), ops.OPS.index(o.op), float(o.tensor),
            ops.DTYPE_BYTES[o.dtype], lg(flops + 1), lg(moved), lg(max(t_c, 1e-12)),
            lg(t_m), lg(max(t_c, 1e-12) / t_m), lg(rows), lg(inner), lg(o.k),
            lg(o.b if o.op in ("bmm", *ops.ATTENTION) else 1), ops.waves(o, gpu),
            lg(moved / (gpu.l2_mb * 2**20)), lg(peak * 1e3 / gpu.mem_gbps), lg(o.h / o.g),
            lg(ops.blocks(o) / gpu.sms))


FEATURES = len(features(ops.Op("add", "fp32", 1), ops.Gpu("", 1, 1, 1, 1, 1, 1, 1)))


@dataclass
class KernelModel:
    physics: Physics
    booster: Any = None  # a lightgbm.Booster; None: physics alone
    provenance: dict[str, Any] = field(default_factory=dict)
    learned: tuple[str, ...] = FAMILIES  # the families the booster corrects

    def seconds(self, o: ops.Op, gpu: ops.Gpu, source: str = "") -> float:
        return float(self.predict([o], [gpu], [source])[0])

    def predict(self, found: list[ops.Op], gpus: list[ops.Gpu],
                sources: list[str] | None = None) -> np.ndarray:
        """Seconds per op (vectorised over the learned part)."""
        sources = sources or [""] * len(found)
        if not found:
            return np.array([])
        base = self.physics.seconds(found, gpus, sources)
        t = terms(found, gpus)
        floor = np.maximum(t["t_c"], t["t_m"])
        use = np.array([o.family in self.learned for o in found])
        if self.booster is None or not use.any():
            return np.maximum(base, floor)
        x = np.array([features(o, g) for o, g, u in zip(found, gpus, use, strict=True) if u])
        base[use] *= np.exp(self.booster.predict(x))
        return np.maximum(base, floor)


def _weights(rows: list[dict[str, Any]]) -> np.ndarray:
    """1 / (rows of the same device and family): every device and family counts alike."""
    counts: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (r["device"], r["o"].family)
        counts[key] = counts.get(key, 0) + 1
    return np.array([1.0 / counts[(r["device"], r["o"].family)] for r in rows])


def terms(found: list[ops.Op], gpus: list[ops.Gpu]) -> dict[str, np.ndarray]:
    """Per op, what ``Physics`` combines: bound times, waves, clock, engine and family."""
    b = np.array([bound(o, g) for o, g in zip(found, gpus, strict=True)])
    return {"t_c": b[:, 0], "t_m": b[:, 1],
            "waves": np.array([ops.waves(o, g) for o, g in zip(found, gpus, strict=True)]),
            "hz": np.array([g.boost_mhz * 1e6 for g in gpus]),
            "peak_per_w": np.array([(g.tensor_tflops if o.tensor else g.fp32_tflops) / g.tdp_w
                                    for o, g in zip(found, gpus, strict=True)]),
            "tensor": np.array([o.tensor for o in found]),
            "family": np.array([FAMILIES.index(o.family) for o in found])}


def fit_physics(rows: list[dict[str, Any]], gpus: dict[str, ops.Gpu]) -> Physics:
    """Least squares in log time (soft-L1 loss) of the physical terms, weighted as above."""
    from scipy.optimize import least_squares

    harnessed = sorted({r["source"] for r in rows
                        if HARNESS.get(r["source"]) != "kernel time"})
    t = terms([r["o"] for r in rows], [gpus[r["device"]] for r in rows])
    src = np.array([harnessed.index(r["source"]) if r["source"] in harnessed else -1
                    for r in rows])
    y = np.log(np.array([r["time_us"] * 1e-6 for r in rows]))
    w = np.sqrt(_weights(rows))

    nf = len(FAMILIES)  # p: e_c tensor, e_c cuda, e_m per family, floor, k_c cuda, harness

    def unpack(p: np.ndarray) -> Physics:
        e = np.exp(p)
        return Physics(eff_compute={"tensor": float(e[0]), "cuda": float(e[1])},
                       eff_memory={f: float(v) for f, v in zip(FAMILIES, e[2:2 + nf],
                                                               strict=True)},
                       floor_cycles=float(e[2 + nf] * 1000),
                       harness_us={s: float(v) for s, v in zip(harnessed, e[4 + nf:],
                                                               strict=True)},
                       tflops_per_w={"tensor": NO_CAP, "cuda": float(e[3 + nf])})

    def residual(p: np.ndarray) -> np.ndarray:
        e = np.exp(p)
        harness = np.where(src >= 0, np.append(e[4 + nf:], 0.0)[src], 0.0) * 1e-6
        sec = combine(t, {"tensor": e[0], "cuda": e[1]},
                      {"tensor": NO_CAP, "cuda": e[3 + nf]}, e[2:2 + nf], e[2 + nf] * 1000,
                      harness)
        return w * (np.log(sec) - y)

    p0 = np.log([0.7, 0.5, *[0.8] * nf, 4.0, 0.2] + [5.0] * len(harnessed))
    return unpack(least_squares(residual, p0, loss="soft_l1", f_scale=0.1).x)


def fit(rows: list[dict[str, Any]], gpus: dict[str, ops.Gpu], learned: bool = True,
        rounds: int = ROUNDS, families: tuple[str, ...] = FAMILIES) -> KernelModel:
    """Fit the physics, then (``learned``) the correction on its log residuals."""
    rows = [r for r in rows if r["time_us"] > 0]
    physics = fit_physics(rows, gpus)
    model = KernelModel(physics, learned=families)
    if learned:
        import lightgbm

        found = [r["o"] for r in rows]
        devs = [gpus[r["device"]] for r in rows]
        srcs = [r["source"] for r in rows]
        base = physics.seconds(found, devs, srcs)
        y = np.log(np.array([r["time_us"] * 1e-6 for r in rows]) / base)
        x = np.array([features(o, g) for o, g in zip(found, devs, strict=True)])
        data = lightgbm.Dataset(x, y, weight=_weights(rows) * len(rows), free_raw_data=True)
        model.booster = lightgbm.train(GBM_PARAMS, data, num_boost_round=rounds)
    model.provenance = {"devices": sorted({r["device"] for r in rows}), "rows": len(rows),
                        "sources": sorted({r["source"] for r in rows}), "learned": learned}
    return model


def save(model: KernelModel, path: Path, extra: dict[str, Any] | None = None) -> None:
    """The model as JSON (written whole, then renamed into place)."""
    data = {"provenance": {**model.provenance, **(extra or {})},
            "physics": asdict(model.physics), "learned": list(model.learned),
            "booster": model.booster.model_to_string() if model.booster else None}
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


_LOADED: dict[tuple[str, float], KernelModel] = {}
Positive = number((">", 0))


class Engines(Strict):
    """A number for each engine."""

    tensor: Positive
    cuda: Positive


class PhysicsFile(Strict):
    """``Physics``' fields in a fit's file: finite, positive numbers, one per engine."""

    eff_compute: Engines
    eff_memory: dict[str, Positive] = {}
    floor_cycles: number((">=", 0)) = 4000.0
    harness_us: dict[str, number((">=", 0))] = {}
    tflops_per_w: Engines


class FitFile(Strict):
    """A fit as ``save`` writes it."""

    provenance: dict[str, Any] = {}
    physics: PhysicsFile
    learned: list[str] = list(FAMILIES)
    booster: str | None = None


def load(path: Path | None = None) -> KernelModel:
    """A saved fit (the shipped one by default); a ConfigError naming the file otherwise."""
    path = Path(path or SHIPPED)
    try:
        stamp = path.stat().st_mtime
    except OSError as e:
        raise ConfigError(f"kernel-time model {path}: {e.strerror}") from None
    if (str(path), stamp) in _LOADED:
        return _LOADED[(str(path), stamp)]
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"kernel-time model {path} is not a fit pimbuild-kernels wrote "
                          f"(not JSON: {e}); refit with `pimbuild-kernels fit`") from None
    check(FitFile, data, f"kernel-time model {path}")
    try:
        physics = Physics(**data["physics"])
        booster = None
        if data.get("booster"):
            import lightgbm

            booster = lightgbm.Booster(model_str=data["booster"])
            if booster.num_feature() != FEATURES:
                raise ValueError(f"its learned part reads {booster.num_feature()} features, "
                                 f"this pimbuild's {FEATURES}")
    except (ValueError, KeyError, TypeError, lightgbm_error()) as e:
        raise ConfigError(f"kernel-time model {path} is not a fit pimbuild-kernels wrote "
                          f"({type(e).__name__}: {e}); refit with `pimbuild-kernels fit`") \
            from None
    model = KernelModel(physics, booster, {**data.get("provenance", {}), "path": str(path)},
                        tuple(data.get("learned", FAMILIES)))
    _LOADED[(str(path), stamp)] = model
    return model


def lightgbm_error() -> type[Exception]:
    import lightgbm

    return lightgbm.basic.LightGBMError


def digest(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]
