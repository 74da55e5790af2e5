"""What the offload core's stages (decide, reinsert, simulate, the policies, eq. 9) ask of the
target they place nests on: ``OffloadTarget``. ``PimTarget`` implements it; another
host + device target that reuses these stages in its pipeline implements it too.

- ``host`` / ``device``: the names of the two sides (``"host"`` / ``"pim"``), the values of a
  decision's ``target``;
- ``costs``: ``DeviceCosts``, what the paper's rule knows of the device (its units, their
  clock and lanes) and the fixed costs of offloading (T_ctx, a switch, a launch, a
  synchronisation), each term defined once, here, and charged the same by ``unit_time``;
- ``unit_time(nest)``: seconds per forward of one unit on the device;
- ``copy_time(fetch_bytes, flush_bytes)``: moving buffers to and from the device;
- ``switch_time(n_region)``: the cost of ``n_region`` host<->device transitions;
- ``boundary``: what reinsert emits (``Boundary``);
- ``units`` / ``units_name`` / ``with_units(n)``: the size the report sweeps (PIM cores);
- ``baselines``: the policies the report compares against;
- ``describe()``, ``report_columns(nest, policy)`` (at least ``t_<device>_s``, the unit's
  device time), ``render(report, out_dir)``: its report (``report.render`` draws the offload
  core's, named by ``Sides``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

from pimbuild.targets import Target

if TYPE_CHECKING:
    from pimbuild.targets.offload.nests import Nest


# The offload core's stages, in pipeline order: what a target built on it lists after the
# shared lower, extract and runtime (``pimbuild.targets.offload.<stage>``).
OFFLOAD_STAGES = ("calibrate", "instrument", "profile", "eager", "decide", "reinsert",
                  "simulate")


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
    options: Any = None  # the policy's own Options (policy.options), where it declares them

    def theta(self, b_cpu_gbps: float) -> float:
        """theta, the read-bandwidth threshold of C3 (the one place it is derived)."""
        return self.theta_gbps if self.theta_gbps is not None else self.theta_ratio * b_cpu_gbps


@dataclass(frozen=True)
class DeviceCosts:
    """The device as the offload rule sees it, and the fixed costs of offloading a unit: the
    one definition of each term, which the rule (C1, C2) and the target's ``unit_time``
    both use."""

    cores: int  # N_core: the device's parallel units
    clock_ghz: float  # f: each unit's instructions per second / 1e9
    lanes: float  # elements one instruction handles
    t_ctx_s: float  # T_ctx of the paper's C1
    switch_s: float  # T_sw: one host<->device transition
    launch_s: float  # per invocation of a unit
    sync_s_per_core: float  # per invocation and synchronised core
    sync_all: bool  # the synchronisation counts every core, not only the busy ones

    def busy_cores(self, n_iter: float) -> float:
        """The cores ``n_iter`` parallel iterations occupy: min(N_core, N_iter), at least 1."""
        return max(1, min(self.cores, n_iter))

    def overhead_s(self, n_iter: float) -> float:
        """One invocation's fixed cost: the launch and the synchronisation of the busy
        cores (every core with ``sync_all``)."""
        synced = self.cores if self.sync_all else self.busy_cores(n_iter)
        return self.launch_s + synced * self.sync_s_per_core

    def compute_bound_s(self, elements: float, instructions: float,
                        vector: bool = True) -> float:
        """N_total * I / (N_core * f): ``elements`` at ``instructions`` each over every core;
        with ``vector``, one instruction handles ``lanes`` elements (the paper's C1 has no
        lanes)."""
        lanes = self.lanes if vector else 1.0
        return elements * instructions / (lanes * self.cores * self.clock_ghz * 1e9)


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
    def costs(self) -> DeviceCosts: ...

    @property
    def units(self) -> int: ...

    def with_units(self, units: int) -> OffloadTarget: ...

    def unit_time(self, nest: Nest) -> float: ...

    def copy_time(self, fetch_bytes: int, flush_bytes: int) -> float: ...

    def switch_time(self, n_region: int) -> float: ...

    def describe(self) -> dict[str, Any]: ...

    def report_columns(self, nest: Nest, policy: PolicyParams) -> dict[str, Any]: ...

    def render(self, report: dict[str, Any], out_dir: Path) -> None: ...


class Sides(NamedTuple):
    """A target's names for its two sides and its units, as the reports write them: a
    report's ``t_<host>_s``, ``t_<device>_s`` and ``<units>`` keys."""

    host: str
    device: str
    units: str

    @classmethod
    def of(cls, target: OffloadTarget) -> Sides:
        return cls(target.host, target.device, target.units_name)

    @property
    def label(self) -> str:
        """``PIM cores``: the device's units as a heading names them."""
        return f"{self.device.upper()} {self.units}"
