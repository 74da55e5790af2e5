"""Per-stage planning: the config slice, the input artifacts, the key and the producer."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

import recipes
from pimbuild import extract, lower
from pimbuild.artifacts import Artifact, Store, artifact_key
from pimbuild.errors import ConfigError

STAGES = ("lower", "extract")  # pipeline order; each stage reads only earlier ones
OUTPUTS = {
    "lower": ("torch.mlir", "linalg.mlir", "scf.mlir", "signature.json"),
    "extract": ("candidates.json",),
}


@dataclass(frozen=True)
class StageTask:
    stage: str
    artifact: Artifact
    params: dict[str, Any]
    inputs: dict[str, Artifact]  # stage name -> the artifact this one reads
    produce: Callable[[Path], None]  # writes the stage's outputs into a folder

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


def _recipe_digest(recipe: str) -> str:
    """The recipe's source text is part of the lower key: editing a recipe rebuilds it."""
    source = Path(recipes.source_file(recipe))
    return hashlib.sha256(source.read_bytes()).hexdigest()[:16] if source.is_file() else ""


def plan(cfg: DictConfig, store: Store, failure_dir: Path) -> list[StageTask]:
    """The stage tasks needed for ``cfg.targets``, in pipeline order."""
    unknown = [t for t in cfg.targets if t not in STAGES]
    if unknown:
        raise ConfigError(f"unknown target(s) {unknown}; stages are: {', '.join(STAGES)}")
    last = max(STAGES.index(t) for t in cfg.targets) if cfg.targets else len(STAGES) - 1
    p = lower_params(cfg)
    lower.validate(p)
    params = {**dataclasses.asdict(p), "recipe_source": _recipe_digest(p.recipe)}
    lower_art = store.artifact("lower", artifact_key("lower", params, {}))
    tasks = [StageTask("lower", lower_art, params, {},
                       lambda out: lower.run(p, out, failure_dir / "lower"))]
    if last >= STAGES.index("extract"):
        inputs = {"lower": lower_art}
        art = store.artifact("extract", artifact_key("extract", {}, {"lower": lower_art.key}))
        tasks.append(StageTask(
            "extract", art, {}, inputs,
            lambda out: extract.run(lower_art.dir / "scf.mlir",
                                    lower_art.dir / "signature.json", out)))
    return tasks
