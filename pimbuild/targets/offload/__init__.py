"""The host-plus-accelerator core: what any target that runs some loop nests of a program on
a device beside the host CPU shares (Torch-PIM's machinery, with the PIM model left out).

A target built on it implements the protocol (``protocol.OffloadTarget``: the two sides, a
unit's device time, copies, switches and the fixed costs the rule charges, the reinsert
boundary, its report) and lists these stages in its pipeline: ``calibrate``, ``instrument``,
``profile`` and ``eager`` (measuring the host: ``counters/``, ``hostfacts``, ``program``),
``decide`` (``policies/``: which nests go to the device), ``reinsert`` (``outline``: the
partitioned program) and ``simulate`` (``hybrid``: eq. 9; ``copymodels``; ``report``,
``summary``). Its config groups are ``platform``, ``profile``, ``policy`` and ``sim``
(``config``). ``pimbuild.targets.pim`` is one such target; ``tests/npu_target/`` is another.
"""
