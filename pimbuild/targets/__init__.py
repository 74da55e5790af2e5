"""Targets: what a build places units on. A target is a package, ``pimbuild/targets/<name>/``
(or any importable package: ``system.name: mypkg:TARGET``), and a ``conf/system/<name>.yaml``
that names it; ``system.name`` picks it from ``TARGETS``.

The contract (``Target``) is what the shared code asks of a target:

- ``pipeline``: stage name -> module, for the stages it has, in the order of
  ``pimbuild.build.graph.STAGES`` (the shared ``pimbuild.frontend.lower``,
  ``pimbuild.codegen.extract`` and
  ``pimbuild.codegen.runtime``, and its own); the task graph follows it;
- ``from_config(cfg)``: the target, a frozen dataclass of its parameters (its fields enter the
  keys of the stages that receive it);
- ``summarize(cfg, dirs, width)``: what a build prints after its stages.

Everything else a target's own stages ask of it is that target's business: a host-plus-
accelerator target implements ``pimbuild.targets.offload.protocol.OffloadTarget`` and reuses
the offload core's stages (``pimbuild.targets.offload``), as ``pim`` does.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pimbuild.core.registry import Registry

if TYPE_CHECKING:
    from omegaconf import DictConfig

# ``offload`` is the host-plus-accelerator core that offload targets share, not a target
TARGETS = Registry("target", "system.name", package="pimbuild.targets", attribute="TARGET",
                   exclude=("offload",))


class Target(Protocol):
    pipeline: ClassVar[dict[str, str]]

    @classmethod
    def from_config(cls, cfg: DictConfig) -> Target: ...

    @classmethod
    def summarize(cls, cfg: DictConfig, dirs: dict[str, Path], width: int) -> list[Any]:
        """What a build prints after its stages, from the folders of the artifacts it built
        or reused (by stage name): rich renderables or markup strings."""
        ...


def from_config(cfg: DictConfig) -> Target:
    """The configured target (``system.name``) with its parameters."""
    return TARGETS.get(cfg.system.name).from_config(cfg)
