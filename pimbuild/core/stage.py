"""The shape every stage module has (docs/design.md §1).

A stage module ``pimbuild.<stage>`` defines

- ``NAME``: the stage's name, also the store folder of its artifacts;
- ``READS``: the stages whose artifacts it reads;
- ``WRITES``: the files it writes into its artifact folder;
- ``Params``: a frozen dataclass, everything it may know of the configuration;
- ``params(cfg) -> Params``: the only function that sees the composed config;
- ``run(inputs: Inputs, params: Params, out: Path) -> None``: writes ``WRITES`` into ``out``;

and may define ``PHASE_READS``: phase name -> stages of that phase of the model it reads
(``model.phases``: the GPU target's simulate reads the prefill's placement beside the decode
step's). Those stages are built under the names ``<phase>.<stage>`` with the model replaced by
the phase's (``tasks.graph.phase_config``); ``Inputs.phase`` gives the stage their folders by
plain stage name. A model without the phase builds nothing more.

An artifact's key hashes the stage name, ``dataclasses.asdict(params)``, the keys of the
artifacts it reads and the code version (``pimbuild.core.artifacts.artifact_key``), so a stage
cannot depend on a value its key does not cover. Stage modules import their heavy
dependencies lazily: planning a build imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pimbuild.core.artifacts import Store


@dataclass(frozen=True)
class ModelParams:
    """The ``model`` config group: which recipe, at which sizes, dtype and seed. Every stage
    that rebuilds the model's arguments (profile, reinsert) receives it, and the frontend
    builds the model from it (``pimbuild.frontend.lower.model_params`` makes it)."""

    name: str
    recipe: str
    size: dict[str, int]
    dtype: str
    seed: int
    # the builder's ``hf`` argument (model=hf: the architecture, config and output field)
    hf: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Inputs:
    """What ``run`` gets besides its params: the artifact folders it reads, by stage, and
    where it may keep a run cache or save a failing input."""

    dirs: dict[str, Path]
    keys: dict[str, str]
    store: Store
    failure_dir: Path  # <run dir>/failure/<stage>: a failing input IR is saved here

    def __getitem__(self, stage: str) -> Path:
        return self.dirs[stage]

    def __contains__(self, stage: str) -> bool:
        return stage in self.dirs

    def phase(self, name: str) -> Inputs:
        """The inputs of phase ``name`` (``<name>.<stage>``) under their plain stage names."""
        prefix = f"{name}."
        return Inputs({s.removeprefix(prefix): d for s, d in self.dirs.items()
                       if s.startswith(prefix)},
                      {s.removeprefix(prefix): k for s, k in self.keys.items()
                       if s.startswith(prefix)}, self.store, self.failure_dir)


def spec_errors(module: ModuleType) -> list[str]:
    """What a stage module lacks of the protocol (empty when it is complete)."""
    missing = [name for name in ("NAME", "READS", "WRITES", "Params", "params", "run")
               if not hasattr(module, name)]
    params = getattr(module, "Params", None)
    if params is not None and not getattr(params, "__dataclass_params__", None):
        missing.append("Params is not a dataclass")
    elif params is not None and not params.__dataclass_params__.frozen:
        missing.append("Params is not frozen")
    return missing


def plain(node: Any) -> Any:
    """A config node as plain Python values (dicts, lists, scalars): what ``params`` puts in
    a stage's frozen ``Params``."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(node, resolve=True, enum_to_str=True)
