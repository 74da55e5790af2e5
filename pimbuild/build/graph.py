"""Stage tasks derived from the stage modules (``pimbuild.core.stage`` describes their shape)."""

from __future__ import annotations

import copy
import dataclasses
import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from omegaconf import DictConfig

from pimbuild.build.config import validate
from pimbuild.core.artifacts import Artifact, Store, artifact_key
from pimbuild.core.errors import ConfigError
from pimbuild.core.stage import Inputs
from pimbuild.targets import TARGETS

# Pipeline order of every stage name. A target names the module of each stage it has (its
# ``pipeline``: stage -> module) and may leave stages out (docs/design.md).
STAGES = ("lower", "extract", "runtime", "calibrate", "instrument", "profile", "eager",
          "decide", "reinsert", "simulate")


def pipeline(system: str) -> dict[str, str]:
    """Stage name -> module of the target ``system``'s pipeline."""
    return TARGETS.get(system).pipeline


def stage_names(system: str) -> list[str]:
    """The stages of the target ``system``, in pipeline order."""
    modules = pipeline(system)
    return [s for s in STAGES if s in modules]


def stage_module(name: str, system: str) -> ModuleType:
    modules = pipeline(system)
    if name not in modules:
        raise ConfigError(f"system={system} has no stage '{name}'; its stages are: "
                          f"{', '.join(stage_names(system))}")
    return importlib.import_module(modules[name])


@dataclass(frozen=True)
class StageTask:
    stage: str  # its name in this build: the stage, or <phase>.<stage> for a phase's
    system: str  # whose pipeline names the stage's module
    artifact: Artifact
    inputs: Inputs
    reads: tuple[Artifact, ...]  # the artifacts it reads
    params: Any  # the stage's frozen Params
    verify: bool = False  # hash every file before reuse, not only those that look changed

    @property
    def name(self) -> str:
        return f"{self.stage}:{self.artifact.key}"

    @property
    def module(self) -> ModuleType:
        return stage_module(self.stage.rpartition(".")[2], self.system)

    def artifact_complete(self) -> bool:
        """doit ``uptodate`` check: the artifact is published and its files are intact."""
        return self.artifact.problem(self.verify, self.reads) is None

    def produce(self, out: Path) -> None:
        """Run the stage into ``out``; it must write every file it promises."""
        self.module.run(self.inputs, self.params, out)
        missing = [f for f in self.module.WRITES if not (out / f).is_file()]
        if missing:
            raise RuntimeError(f"stage {self.stage} did not write {missing}")


def needed(stages: list[str], system: str) -> list[str]:
    """``stages`` and every stage they read, in pipeline order."""
    modules = pipeline(system)
    unknown = [t for t in stages if t not in modules]
    if unknown:
        raise ConfigError(f"unknown stage(s) {unknown} in stages=; the stages of "
                          f"system={system} are: {', '.join(stage_names(system))}")
    wanted: set[str] = set()
    todo = list(stages)
    while todo:
        stage = todo.pop()
        if stage not in wanted:
            wanted.add(stage)
            todo.extend(stage_module(stage, system).READS)
    return [s for s in STAGES if s in wanted]


def key(stage: str, params: Any, inputs: dict[str, str], module: str = "") -> str:
    """The artifact key: the stage and the module implementing it (two targets' ``extract``
    stages with equal Params and inputs write different files), exactly its Params, its
    input keys, the code version."""
    return artifact_key(f"{stage}@{module}" if module else stage, dataclasses.asdict(params),
                        inputs)


def phase_config(cfg: DictConfig, phase: str) -> DictConfig | None:
    """``cfg`` with the model replaced by its phase ``phase`` (``model.phases``), or None
    when the model has no such phase. The phase's recipe and size replace the model's; its
    name, dtype and seed default to ``<model>.<phase>`` and the model's."""
    from omegaconf import OmegaConf, open_dict

    spec = cfg.model.get("phases", {}).get(phase)
    if spec is None:
        return None
    if "recipe" not in spec:
        raise ConfigError(f"model.phases.{phase} of model {cfg.model.name} needs a recipe")
    model = OmegaConf.to_container(cfg.model, resolve=True)  # ${model.size...} as they are
    model.update(name=f"{cfg.model.name}.{phase}", phases={}, size={})
    model.update(OmegaConf.to_container(spec, resolve=True))
    sub = copy.deepcopy(cfg)
    with open_dict(sub):
        for field, value in model.items():
            sub.model[field] = value
    return sub


def plan(cfg: DictConfig, store: Store, failure_dir: Path) -> list[StageTask]:
    """The stage tasks needed for ``cfg.stages``, in pipeline order (a phase's stages just
    before the stage reading them). Every stage's params are built (and so checked) before
    anything runs."""
    validate(cfg)
    system = cfg.system.name

    TARGETS.check(system)
    tasks: dict[str, StageTask] = {}
    _plan(cfg, list(cfg.stages), "", system, store, failure_dir, tasks)
    return list(tasks.values())


def _plan(cfg: DictConfig, requested: list[str], phase: str, system: str, store: Store,
          failure_dir: Path, tasks: dict[str, StageTask]) -> None:
    """Add the tasks of the stages ``requested`` of ``phase`` ('' for the model itself) to
    ``tasks``."""
    def named(stage: str) -> str:
        return f"{phase}.{stage}" if phase else stage

    stages = needed(requested, system)
    params = {stage: stage_module(stage, system).params(cfg) for stage in stages}
    for stage in stages:
        module = stage_module(stage, system)
        # by the names the stage knows them: its own phase's plainly, a sub-phase's prefixed
        reads = {d: tasks[named(d)].artifact for d in module.READS}
        for sub_phase, wanted in getattr(module, "PHASE_READS", {}).items():
            sub = None if phase else phase_config(cfg, sub_phase)  # phases do not nest
            if sub is not None:
                _plan(sub, list(wanted), sub_phase, system, store, failure_dir, tasks)
                reads |= {f"{sub_phase}.{d}": tasks[f"{sub_phase}.{d}"].artifact
                          for d in wanted}
        keys = {d: a.key for d, a in reads.items()}
        name = named(stage)
        artifact = store.artifact(name, key(stage, params[stage], keys, module.__name__))
        inputs = Inputs(dirs={d: a.dir for d, a in reads.items()}, keys=keys, store=store,
                        failure_dir=failure_dir / name)
        tasks[name] = StageTask(name, system, artifact, inputs, tuple(reads.values()),
                                params[stage], bool(cfg.verify))
