"""Stage tasks derived from the stage modules (``pimbuild.stage`` describes their shape)."""

from __future__ import annotations

import dataclasses
import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from omegaconf import DictConfig

from pimbuild.artifacts import Artifact, Store, artifact_key
from pimbuild.errors import ConfigError
from pimbuild.stage import Inputs

# Pipeline order. A stage is the module pimbuild.<name>.
STAGES = ("lower", "extract", "runtime", "calibrate", "instrument", "profile", "decide",
          "reinsert", "simulate")


def stage_module(name: str) -> ModuleType:
    return importlib.import_module(f"pimbuild.{name}")


@dataclass(frozen=True)
class StageTask:
    stage: str
    artifact: Artifact
    inputs: Inputs
    params: Any  # the stage's frozen Params

    @property
    def name(self) -> str:
        return f"{self.stage}:{self.artifact.key}"

    @property
    def module(self) -> ModuleType:
        return stage_module(self.stage)

    def artifact_complete(self) -> bool:
        """doit ``uptodate`` check: the content-addressed artifact exists and is complete."""
        return self.artifact.complete

    def produce(self, out: Path) -> None:
        self.module.run(self.inputs, self.params, out)

    @property
    def targets(self) -> list[Path]:
        return [self.artifact.dir / f for f in self.module.WRITES]

    @property
    def file_dep(self) -> list[Path]:
        return [self.inputs[s] / f for s in self.inputs.dirs for f in stage_module(s).WRITES]


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
            todo.extend(stage_module(stage).READS)
    return [s for s in STAGES if s in wanted]


def key(stage: str, params: Any, inputs: dict[str, str]) -> str:
    """The artifact key: the stage, exactly its Params, its input keys, the code version."""
    return artifact_key(stage, dataclasses.asdict(params), inputs)


def plan(cfg: DictConfig, store: Store, failure_dir: Path) -> list[StageTask]:
    """The stage tasks needed for ``cfg.targets``, in pipeline order. Every stage's params
    are built (and so checked) before anything runs."""
    stages = needed(list(cfg.targets))
    params = {stage: stage_module(stage).params(cfg) for stage in stages}
    tasks: dict[str, StageTask] = {}
    for stage in stages:
        reads = {d: tasks[d].artifact for d in stage_module(stage).READS}
        keys = {d: a.key for d, a in reads.items()}
        artifact = store.artifact(stage, key(stage, params[stage], keys))
        inputs = Inputs(dirs={d: a.dir for d, a in reads.items()}, keys=keys, store=store,
                        failure_dir=failure_dir / stage)
        tasks[stage] = StageTask(stage, artifact, inputs, params[stage])
    return list(tasks.values())
