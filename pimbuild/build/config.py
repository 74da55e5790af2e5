"""The composed config: the root schema and the schema registry Hydra composes
``pimbuild/conf/`` against, the ranges every number is checked against, and ``validate``.
Each group's
schema and ranges live with the code that reads it (``pimbuild.frontend.lower``: ``model``,
``lowering``; ``pimbuild.targets.offload.config``: ``platform``, ``profile``, ``policy``,
``sim``; ``pimbuild.targets.pim.config``: ``pim``; ``pimbuild.targets.gpus.config``:
``device``, ``link``, ``gpus``, ``serve``); this module composes them, with the groups of
its own (``system``, ``experiment``) and the top-level keys.

The schemas hold types, and the few defaults a user's own file may leave out (a model's
``size``, ``dtype`` and ``seed``, ``system.params``); every other default lives in the YAML
under ``pimbuild/conf/`` (one home for each value). Each YAML file under
``pimbuild/conf/<group>/`` starts from
the schema ``<group>_schema``, so that a badly typed override (``pim.cores=abc``) fails while
Hydra composes the config. Options that name a pluggable part (``lowering.fusion``,
``profile.backend``, ``policy.name``, ``gpus.planner``, ``sim.copy_model``, ``system.name``)
are strings checked against their registry when the build is planned, before anything runs;
a value no file sets is one error line naming its key (``validate``).
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from pimbuild.core.errors import ConfigError
from pimbuild.core.schema import check
from pimbuild.frontend import lower
from pimbuild.frontend.lower import LoweringConfig, ModelConfig
from pimbuild.targets.gpus import config as gpus_config
from pimbuild.targets.gpus.config import (
    DeviceConfig,
    DeviceFile,
    GpusConfig,
    LinkConfig,
    ServeConfig,
)
from pimbuild.targets.offload import config as offload_config
from pimbuild.targets.offload.config import (
    PlatformConfig,
    PolicyConfig,
    ProfileConfig,
    SimConfig,
)
from pimbuild.targets.pim import config as pim_config
from pimbuild.targets.pim.config import PimConfig


@dataclass
class SystemConfig:
    name: str = MISSING  # the target (pimbuild.targets.TARGETS)
    # A target's own parameters, for a target without a config group of its own (a user's
    # target: its pimbuild/conf/system/<name>.yaml holds them); the shipped targets have groups.
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class ExperimentConfig:
    """``+experiment=<name>`` (``pimbuild/conf/experiment/``; pimbuild.paper.experiments)."""

    name: str = MISSING  # the module of pimbuild.paper.experiments that tabulates it
    points: dict[str, list[str]] = MISSING  # point name -> the overrides of its build
    only: list[str] = field(default_factory=list)  # build only these points (empty: all)


@dataclass
class Config:
    model: ModelConfig = MISSING
    lowering: LoweringConfig = MISSING
    platform: PlatformConfig = MISSING
    profile: ProfileConfig = MISSING
    system: SystemConfig = MISSING
    pim: PimConfig = MISSING
    policy: PolicyConfig = MISSING
    sim: SimConfig = MISSING
    # The heterogeneous-GPU target (system=gpus): the device catalogue, the devices used (in
    # order: the first is the "left" device of a pair), the link and the target's factors.
    device: dict[str, DeviceConfig] = MISSING
    devices: list[str] = MISSING
    link: LinkConfig = MISSING
    tp_link: LinkConfig = MISSING  # joins a TP group's twins (AF with TP attention)
    gpus: GpusConfig = MISSING
    serve: ServeConfig = MISSING
    stages: list[str] = MISSING  # the stages to build, with everything they read
    store: str = MISSING  # the artifact store, relative to the launch directory
    show_candidates: bool = MISSING  # print the candidates table at the end of a run
    verify: bool = MISSING  # hash every file of an artifact before reusing it
    timeline: bool = MISSING  # the simulate stage also writes timeline.json (Trace Event)
    objective: str = MISSING  # what a build returns to a searching sweeper: headline | a column
    experiment: ExperimentConfig | None = None  # +experiment=<name>: build every point


SCHEMAS: dict[str, Any] = {**lower.SCHEMAS, "system": SystemConfig, **offload_config.SCHEMAS,
                           **pim_config.SCHEMAS, **gpus_config.SCHEMAS}


def register_configs() -> None:
    """Register the schemas: ``base_config`` and ``<group>/<group>_schema``."""
    cs = ConfigStore.instance()
    cs.store(name="base_config", node=Config)
    for group, schema in SCHEMAS.items():
        cs.store(group=group, name=f"{group}_schema", node=schema)


# The range of every number of every group: (comparison, bound), or (comparison, bound,
# upper) where the value must also be <= upper; each group's are with its schema. Checked with
# ``validate`` before any stage is planned; ``None`` is allowed where the schema says
# ``| None``.
RANGES: dict[str, tuple[Any, ...]] = {**lower.RANGES, **offload_config.RANGES,
                                      **pim_config.RANGES,
                                      **gpus_config.RANGES}
# Lists that mean nothing empty: the stages to build, and each group's own.
NONEMPTY = ("stages", *lower.NONEMPTY, *offload_config.NONEMPTY, *gpus_config.NONEMPTY)


def validate(cfg: Any) -> None:
    """Raise a ConfigError for the first key no file set, the first list of ``NONEMPTY`` that
    is empty, or the first number that is not finite (``link.gbps must be a finite number (got
    inf)``) or outside its range (``pim.cores must be >= 1 (got -4)``)."""
    import math

    from omegaconf import OmegaConf

    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        more = f" (nor {', '.join(missing[1:4])}{', ...' if len(missing) > 4 else ''})" \
            if len(missing) > 1 else ""
        raise ConfigError(f"{missing[0]} has no value{more}: set it in its config file or on "
                          f"the command line ({missing[0]}=...)")
    for path in NONEMPTY:
        value = OmegaConf.select(cfg, path, throw_on_missing=False)
        if OmegaConf.is_list(value) and len(value) == 0:
            raise ConfigError(f"{path} is empty: name at least one")

    # every device of the catalogue by the device file's schema (pimbuild-kernels' too)
    for name, device in (OmegaConf.select(cfg, "device", throw_on_missing=False) or {}).items():
        check(DeviceFile, OmegaConf.to_container(device), f"device.{name}")
    for path, (op, bound, *upper) in RANGES.items():
        value = OmegaConf.select(cfg, path, throw_on_missing=False)
        values = list(value) if OmegaConf.is_list(value) else [value]
        for v in values:
            if v is None:
                continue
            if not isinstance(v, (int, float)) or isinstance(v, bool):
                raise ConfigError(f"{path} must be a number (got {v!r})")
            if not math.isfinite(v):
                raise ConfigError(f"{path} must be a finite number (got {v}): "
                                  f"give a value {op} {bound:g}")
            if not (v >= bound if op == ">=" else v > bound):
                raise ConfigError(f"{path} must be {op} {bound:g} (got {v})")
            if upper and v > upper[0]:
                raise ConfigError(f"{path} must be <= {upper[0]:g} (got {v})")


def unknown_key(path: str) -> str | None:
    """None if the schema has ``path`` (``pim.cores``, ``device.l40s.sms``, a key below a
    free-form mapping such as ``model.size.n``); else the error line, with the nearest key
    the schema has (``modle`` -> ``model``)."""
    node: Any = Config
    parts = path.split(".")
    for i, part in enumerate(parts):
        origin = typing.get_origin(node)
        if origin is dict:  # any key; below it, the mapping's value type
            node = typing.get_args(node)[1]
            continue
        if origin in (list, typing.Union) or node is Any or not dataclasses.is_dataclass(node):
            return None  # a list, a union or a free value: not walked further
        hints = typing.get_type_hints(node)
        if part not in hints:
            here = ".".join(parts[:i])
            near = difflib.get_close_matches(part, list(hints), n=1)
            suggestion = f"; did you mean `{here + '.' if here else ''}{near[0]}=`?" if near \
                else f" (keys{' of ' + here if here else ''}: {', '.join(hints)})"
            return f"`{path}` is not a key of pimbuild's config{suggestion}"
        node = hints[part]
        if typing.get_origin(node) in (typing.Union, types.UnionType):  # X | None
            node = next(a for a in typing.get_args(node) if a is not type(None))
    return None
