"""What the PIM target's stages (decide, reinsert, simulate, the policies, eq. 9) ask of the
target they place nests on: ``OffloadTarget``. ``PimTarget`` implements it; another
host + device target that reuses these stages in its pipeline implements it too.

- ``host`` / ``device``: the names of the two sides (``"host"`` / ``"pim"``), the values of a
  decision's ``target``;
- ``unit_time(nest)``: seconds per forward of one unit on the device;
- ``copy_time(fetch_bytes, flush_bytes)``: moving buffers to and from the device;
- ``switch_time(n_region)``: the cost of ``n_region`` host<->device transitions;
- ``boundary``: what reinsert emits (``Boundary``);
- ``units`` / ``units_name`` / ``with_units(n)``: the size the report sweeps (PIM cores);
- ``baselines``: the policies the report compares against;
- ``describe()``, ``report_columns(nest, policy)``, ``render(report, out_dir)``: its report.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from pimbuild.targets import Target

if TYPE_CHECKING:
    from pimbuild.targets.pim.nests import Nest


@dataclass(frozen=True)
class PolicyParams:
    """The ``policy`` config group (here, below the policies and the targets that both read
    it)."""

    name: str
    theta_ratio: float  # theta = theta_ratio * B_cpu ...
    theta_gbps: float | None  # ... unless an absolute theta is set
    sigma: float
    i_min: float
    c1: str = "model"  # paper | model: C1's fixed costs (policies.torchpim)
    c4: str = "read_later"  # paper | read_later: C4's condition (policies.torchpim)
    i_compute: float | None = None  # C5's instructions per element; None: no C5 (the paper)

    def theta(self, b_cpu_gbps: float) -> float:
        """theta, the read-bandwidth threshold of C3 (the one place it is derived)."""
        return self.theta_gbps if self.theta_gbps is not None else self.theta_ratio * b_cpu_gbps


@dataclass(frozen=True)
class Boundary:
    """What reinsert emits: calls ``begin(segment)`` / ``end(segment)`` around each segment of
    offloaded units, and each unit outlined into ``@<outline_prefix><id>`` carrying the
    attribute ``pimbuild.target = "<device>"``."""

    begin: str
    end: str
    outline_prefix: str
    device: str


class OffloadTarget(Target, Protocol):
    host: ClassVar[str]
    device: ClassVar[str]
    units_name: ClassVar[str]
    baselines: ClassVar[tuple[str, ...]]

    @property
    def boundary(self) -> Boundary: ...

    @property
    def units(self) -> int: ...

    def with_units(self, units: int) -> OffloadTarget: ...

    def unit_time(self, nest: Nest) -> float: ...

    def copy_time(self, fetch_bytes: int, flush_bytes: int) -> float: ...

    def switch_time(self, n_region: int) -> float: ...

    def describe(self) -> dict[str, Any]: ...

    def report_columns(self, nest: Nest, policy: PolicyParams) -> dict[str, Any]: ...

    def render(self, report: dict[str, Any], out_dir: Path) -> None: ...
