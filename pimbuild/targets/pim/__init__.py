"""Target ``pim`` (``system=pim``, the default): host CPU + processing-in-memory cores
(Torch-PIM). This package owns the target: its class (``target.PimTarget``: the PIM timing
model and the stage modules of its pipeline), its stages (``calibrate``, ``instrument``,
``profile``, ``eager``, ``decide``, ``reinsert``, ``simulate``), its policies
(``policies/``), counter backends (``counters/``), eq. 9 (``hybrid``), the copy models and its
report and console summary."""

from pimbuild.targets.pim.target import PimTarget

TARGET = PimTarget
