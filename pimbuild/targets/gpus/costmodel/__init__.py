"""The GPU target's cost model: the data dependency graph of a layer's kernels (``ddg``), the
time and transfers of a placement on it (``cost``: the cycle time and critical path every
planner optimises and every check evaluates), the spec sheet's roofline (``roofline``) and
the kernel-time model's error drawn into the cost (``robust``)."""
