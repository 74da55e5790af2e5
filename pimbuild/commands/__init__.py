"""The commands: ``pimbuild`` (``cli``, a Hydra app; ``usage``, its help; ``sweep``, the
multirun summary) and ``pimbuild-opt`` (``opt``). The GPU target's own commands,
``pimbuild-kernels`` and ``pimbuild-serve``, live with the code they drive.
"""
