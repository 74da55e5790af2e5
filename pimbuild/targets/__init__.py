"""Targets: the side that runs an offloaded unit, behind one interface (docs/design.md §5).

A target may name its own stage modules (a class attribute ``pipeline``: stage name ->
module, as the heterogeneous-GPU target ``gpus`` does, §10); one without it runs the default
loop-nest pipeline, whose stages ask of an offload target (``Target`` below):

- ``host`` / ``device``: the names of the two sides (``"host"`` / ``"pim"``), the values of a
  decision's ``target``;
- ``unit_time(nest)``: seconds per forward of one unit on the device;
- ``copy_time(fetch_bytes, flush_bytes)``: moving buffers to and from the device;
- ``switch_time(n_region)``: the cost of ``n_region`` host<->device transitions;
- ``boundary``: what reinsert emits (``Boundary``);
- ``units`` / ``units_name`` / ``with_units(n)``: the size the report sweeps (PIM cores);
- ``baselines``: the policies the report compares against;
- ``describe()``, ``report_columns(nest, policy)``, ``render(report, out_dir)``: its report.

A target is a frozen dataclass built from the composed config by ``from_config(cfg)``; its
fields enter the keys of the stages that receive it. ``system.name`` picks it from
``TARGETS``: a module ``pimbuild/targets/<name>.py`` whose ``TARGET`` is the class, or
``package.module:Class``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pimbuild.registry import Registry

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from pimbuild.targets.pim.nests import Nest
    from pimbuild.targets.pim.policies import PolicyParams

TARGETS = Registry("target", "system.name", package="pimbuild.targets", attribute="TARGET")


@dataclass(frozen=True)
class Boundary:
    """What reinsert emits: calls ``begin(segment)`` / ``end(segment)`` around each segment of
    offloaded units, and each unit outlined into ``@<outline_prefix><id>`` carrying the
    attribute ``pimbuild.target = "<device>"``."""

    begin: str
    end: str
    outline_prefix: str
    device: str


class Target(Protocol):
    host: ClassVar[str]
    device: ClassVar[str]
    units_name: ClassVar[str]
    baselines: ClassVar[tuple[str, ...]]

    @classmethod
    def from_config(cls, cfg: DictConfig) -> Target: ...

    @property
    def boundary(self) -> Boundary: ...

    @property
    def units(self) -> int: ...

    def with_units(self, units: int) -> Target: ...

    def unit_time(self, nest: Nest) -> float: ...

    def copy_time(self, fetch_bytes: int, flush_bytes: int) -> float: ...

    def switch_time(self, n_region: int) -> float: ...

    def describe(self) -> dict[str, Any]: ...

    def report_columns(self, nest: Nest, policy: PolicyParams) -> dict[str, Any]: ...

    def render(self, report: dict[str, Any], out_dir: Path) -> None: ...

    @classmethod
    def summarize(cls, cfg: DictConfig, dirs: dict[str, Path], width: int) -> list[Any]:
        """What a build prints after its stages, from the folders of the artifacts it built
        or reused (by stage name): rich renderables or markup strings."""
        ...


def from_config(cfg: DictConfig) -> Target:
    """The configured target (``system.name``) with its parameters."""
    return TARGETS.get(cfg.system.name).from_config(cfg)
