"""Target ``pim`` (``system=pim``, the default): host CPU + processing-in-memory cores
(Torch-PIM). The target is its timing model (``target.PimTarget``, which implements the
host-plus-accelerator protocol, ``pimbuild.targets.offload.protocol.OffloadTarget``) and its
config group (``config``: ``pim``); its stages, policies, counter backends, copy models,
eq. 9, report and summary are the offload core's (``pimbuild.targets.offload``)."""

from pimbuild.targets.pim.target import PimTarget

TARGET = PimTarget
