"""Per-stage planning: the config slice, the input artifacts, the key and the producer.

Each stage is listed in ``STAGES`` (pipeline order) with the stages it reads (``DEPS``), the
files it writes (``OUTPUTS``), the config slice that enters its key (``_params_*``) and the
call that produces it (``_produce_*``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

import recipes
from pimbuild import (
    calibrate,
    decide,
    extract,
    instrument,
    lower,
    nests,
    pim_model,
    profile,
    reinsert,
    runtime,
    simulate,
)
from pimbuild.artifacts import Artifact, Store, artifact_key, run_cache
from pimbuild.errors import ConfigError

STAGES = ("lower", "extract", "runtime", "calibrate", "instrument", "profile", "decide",
          "reinsert", "simulate")
DEPS: dict[str, tuple[str, ...]] = {
    "lower": (),
    "extract": ("lower",),
    "runtime": (),
    "instrument": ("lower", "extract", "runtime"),
    "profile": ("lower", "extract", "runtime", "instrument", "calibrate"),
    "calibrate": ("runtime",),
    "decide": ("extract", "profile", "calibrate"),
    "reinsert": ("lower", "runtime", "decide"),
    "simulate": ("extract", "profile", "calibrate", "decide", "reinsert"),
}
OUTPUTS = {
    "lower": ("torch.mlir", "linalg.mlir", "scf.mlir", "signature.json"),
    "extract": ("candidates.json",),
    "runtime": (runtime.LIBRARY, "runtime.json"),
    "instrument": ("instrumented.mlir", "llvm.mlir", "forward.o"),
    "profile": ("timing.csv", "counters.csv", "profile.json"),
    "calibrate": ("calibrate.json",),
    "decide": ("decisions.json",),
    "reinsert": ("hybrid.mlir", "hybrid_llvm.mlir", "hybrid.o", "reinsert.json"),
    "simulate": ("report.json", "report.md", *simulate.PLOTS),
}
Producer = Callable[[Path], None]


@dataclass(frozen=True)
class StageTask:
    stage: str
    artifact: Artifact
    inputs: dict[str, Artifact]  # stage name -> the artifact this one reads
    produce: Producer  # writes the stage's outputs into a folder

    @property
    def name(self) -> str:
        return f"{self.stage}:{self.artifact.key}"

    def artifact_complete(self) -> bool:
        """doit ``uptodate`` check: the content-addressed artifact exists and is complete."""
        return self.artifact.complete

    @property
    def targets(self) -> list[Path]:
        return [self.artifact.dir / f for f in OUTPUTS[self.stage]]

    @property
    def file_dep(self) -> list[Path]:
        return [self.inputs[s].dir / f for s in self.inputs for f in OUTPUTS[s]]


def lower_params(cfg: DictConfig) -> lower.LowerParams:
    model = OmegaConf.to_container(cfg.model, resolve=True, enum_to_str=True)
    lowering = OmegaConf.to_container(cfg.lowering, resolve=True, enum_to_str=True)
    return lower.LowerParams(name=model["name"], recipe=model["recipe"],
                             size=dict(model["size"]), dtype=model["dtype"],
                             seed=model["seed"], **lowering)


def profile_params(cfg: DictConfig) -> profile.ProfileParams:
    pf = cfg.platform
    return profile.ProfileParams(
        backend=cfg.profile.backend.name, repetitions=cfg.profile.repetitions,
        warmup=cfg.profile.warmup, events=dict(pf.events), cache_line=pf.cache_line,
        l1d_bytes=pf.l1d_bytes, l1d_assoc=pf.l1d_assoc, llc_bytes=pf.llc_bytes,
        llc_assoc=pf.llc_assoc)


def calibrate_params(cfg: DictConfig) -> calibrate.CalibrateParams:
    return calibrate.CalibrateParams(b_cpu_gbps=cfg.platform.b_cpu_gbps,
                                     buffer_mib=cfg.platform.calibration_mib,
                                     register_block=cfg.lowering.register_block)


def rule_params(cfg: DictConfig, b_cpu_gbps: float) -> decide.RuleParams:
    theta = cfg.policy.theta_gbps
    return decide.RuleParams(
        n_core=cfg.pim.cores, f_pim_ghz=cfg.pim.freq_ghz, t_ctx_s=cfg.pim.t_ctx_us * 1e-6,
        i_min=cfg.policy.i_min, sigma=cfg.policy.sigma, cache_line=cfg.platform.cache_line,
        theta_gbps=theta if theta is not None else cfg.policy.theta_ratio * b_cpu_gbps)


def model_params(cfg: DictConfig) -> pim_model.PimModel:
    pim = OmegaConf.to_container(cfg.pim, resolve=True)
    return pim_model.PimModel(
        n_core=pim.pop("cores"), f_pim_ghz=pim.pop("freq_ghz"),
        cache_line=cfg.platform.cache_line, b_mem_gbps=cfg.platform.b_mem_gbps,
        **{k: v for k, v in pim.items() if k != "t_ctx_us"})


def host_cpu() -> str:
    """The host's CPU model: measurements made on one host are not reused on another."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _recipe_digest(recipe: str) -> str:
    """The recipe's source text is part of the lower key: editing a recipe rebuilds it."""
    source = Path(recipes.source_file(recipe))
    return hashlib.sha256(source.read_bytes()).hexdigest()[:16] if source.is_file() else ""


# --- config slices ----------------------------------------------------------------------

def _params_lower(cfg: DictConfig) -> dict[str, Any]:
    p = lower_params(cfg)
    keys = {**dataclasses.asdict(p), "recipe_source": _recipe_digest(p.recipe)}
    del keys["register_block"]  # code generation: instrument, reinsert and calibrate key it
    return keys


def _params_profile(cfg: DictConfig) -> dict[str, Any]:
    return {**dataclasses.asdict(profile_params(cfg)), "host": host_cpu()}


def _params_decide(cfg: DictConfig) -> dict[str, Any]:
    keys = {"policy": OmegaConf.to_container(cfg.policy, resolve=True, enum_to_str=True),
            "pim": {k: cfg.pim[k] for k in ("cores", "freq_ghz", "t_ctx_us")},
            "cache_line": cfg.platform.cache_line}
    if cfg.policy.name.name == "oracle":  # only the oracle reads the PIM model
        keys["model"] = _params_model(cfg)
    return keys


def _params_model(cfg: DictConfig) -> dict[str, Any]:
    return {"model": dataclasses.asdict(model_params(cfg)),
            "sim": OmegaConf.to_container(cfg.sim, resolve=True, enum_to_str=True)}


PARAMS: dict[str, Callable[[DictConfig], dict[str, Any]]] = {
    "lower": _params_lower,
    "extract": lambda cfg: {},
    "runtime": lambda cfg: runtime.probe(),
    "instrument": lambda cfg: {"register_block": cfg.lowering.register_block},
    "profile": _params_profile,
    "calibrate": lambda cfg: {**dataclasses.asdict(calibrate_params(cfg)), "host": host_cpu()},
    "decide": _params_decide,
    "reinsert": lambda cfg: {},
    "simulate": lambda cfg: {**_params_decide(cfg), **_params_model(cfg)},
}


# --- producers --------------------------------------------------------------------------

def _produce(stage: str, cfg: DictConfig, inputs: dict[str, Artifact], store: Store,
             failure_dir: Path) -> Producer:
    fail = failure_dir / stage
    if stage == "lower":
        p = lower_params(cfg)
        return lambda out: lower.run(p, out, fail)
    if stage == "extract":
        lo = inputs["lower"].dir
        return lambda out: extract.run(lo / "scf.mlir", lo / "signature.json", out)
    if stage == "runtime":
        return runtime.build
    if stage == "instrument":
        lo, ex, rt = (inputs[s].dir for s in ("lower", "extract", "runtime"))
        block = cfg.lowering.register_block
        return lambda out: instrument.run(lo / "scf.mlir", ex / "candidates.json",
                                          rt / runtime.LIBRARY, block, out, fail)
    if stage == "profile":
        p = profile_params(cfg)
        lp = lower_params(cfg)
        lo, ex, rt, ins, ca = (inputs[s].dir for s in ("lower", "extract", "runtime",
                                                        "instrument", "calibrate"))

        def produce(out: Path) -> None:
            inp = profile.Inputs.from_artifacts(lp, lo, ex, ins, rt)
            profile.run(inp, p, calibrate.b_cpu(ca), out)
        return produce
    if stage == "calibrate":
        p = calibrate_params(cfg)
        rt = inputs["runtime"].dir
        return lambda out: calibrate.run(p, rt, out)
    if stage in ("decide", "simulate"):
        return _produce_decide_or_simulate(stage, cfg, inputs)
    if stage == "reinsert":
        return _produce_reinsert(cfg, inputs, store, fail)
    raise ValueError(stage)


def _produce_reinsert(cfg: DictConfig, inputs: dict[str, Artifact], store: Store,
                      fail: Path) -> Producer:
    """The hybrid program depends on which nests are offloaded, not on why: placements that
    come out the same (a theta sweep, a core count that changes nothing) share one build."""
    lo, rt, de = (inputs[s].dir for s in ("lower", "runtime", "decide"))
    lp = lower_params(cfg)

    def produce(out: Path) -> None:
        offloaded = json.loads((de / "decisions.json").read_text())["offloaded"]
        content = {"lower": inputs["lower"].key, "runtime": inputs["runtime"].key,
                   "register_block": lp.register_block, "offloaded": sorted(offloaded)}
        run_cache(store, "reinsert", content, out, lambda tmp: reinsert.run(
            lo / "scf.mlir", lo / "signature.json", de / "decisions.json",
            rt / runtime.LIBRARY, lp, tmp, fail))
    return produce


def _produce_decide_or_simulate(stage: str, cfg: DictConfig,
                                inputs: dict[str, Artifact]) -> Producer:
    ex, pr, ca = (inputs[s].dir for s in ("extract", "profile", "calibrate"))
    policy = cfg.policy.name.name
    copy_model = cfg.sim.copy_model.name
    model = model_params(cfg)
    cores_sweep = list(cfg.sim.cores_sweep)

    def produce(out: Path) -> None:
        found = nests.load_nests(ex / "candidates.json", pr / "timing.csv",
                                 pr / "counters.csv")
        info = json.loads((pr / "profile.json").read_text())
        b_cpu = calibrate.b_cpu(ca)
        rule = rule_params(cfg, b_cpu)
        outputs = nests.outputs(ex / "candidates.json")
        if stage == "decide":
            decisions = decide.place(policy, found, rule, info["forward_median_s"], model,
                                     copy_model, outputs)
            decide.write(out / "decisions.json", policy, rule, decisions)
            return
        de, re = inputs["decide"].dir, inputs["reinsert"].dir
        sim_inputs = simulate.SimInputs(
            nests=found, forward_s=info["forward_median_s"], outputs=outputs,
            decisions=json.loads((de / "decisions.json").read_text()),
            reinsert=json.loads((re / "reinsert.json").read_text()),
            counter_backend=info["counter_backend"], b_cpu_gbps=b_cpu)
        simulate.write(simulate.simulate(sim_inputs, policy, rule, model, copy_model,
                                         cores_sweep), out)
    return produce


def needed(targets: list[str]) -> list[str]:
    """The targets and every stage they read, in pipeline order."""
    unknown = [t for t in targets if t not in STAGES]
    if unknown:
        raise ConfigError(f"unknown target(s) {unknown}; stages are: {', '.join(STAGES)}")
    wanted: set[str] = set()
    todo = list(targets)
    while todo:
        stage = todo.pop()
        if stage not in wanted:
            wanted.add(stage)
            todo.extend(DEPS[stage])
    return [s for s in STAGES if s in wanted]


def plan(cfg: DictConfig, store: Store, failure_dir: Path) -> list[StageTask]:
    """The stage tasks needed for ``cfg.targets``, in pipeline order."""
    stages = needed(list(cfg.targets))
    lower.validate(lower_params(cfg))
    tasks: dict[str, StageTask] = {}
    for stage in stages:
        inputs = {d: tasks[d].artifact for d in DEPS[stage]}
        params = PARAMS[stage](cfg)
        key = artifact_key(stage, params, {d: a.key for d, a in inputs.items()})
        tasks[stage] = StageTask(stage, store.artifact(stage, key), inputs,
                                 _produce(stage, cfg, inputs, store, failure_dir))
    return list(tasks.values())
