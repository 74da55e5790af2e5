"""Kernel time backend ``cuda``: kernel times measured on this machine's GPU.

Where ``torch.cuda.is_available()`` is false it refuses with a StageError naming why. Where it
is true, the recipe's exported graph (before decomposition: its node names are the
``source_node`` of extract's kernels) runs node by node on the GPU under a ``torch.fx``
interpreter, each node between two CUDA events; a node's time is the minimum over
``repetitions`` runs after ``warmup``. A kernel then gets the time of the nodes it came from,
split between the kernels of one node in proportion to their roofline times; a node no kernel
names (fusion merged it into a consumer) is charged to the next node that has kernels. Only
the configured devices this GPU is (its name contains theirs: ``H100`` in ``NVIDIA H100 80GB
HBM3``) are measured; the others keep their roofline times, and ``profile.json`` says which.

This backend has not yet run on a GPU: the sessions that built it had none. Its node timing
and the split run on the CPU in the tests (``device="cpu"``, wall-clock timing).
"""

from __future__ import annotations

import time
from typing import Any

from pimbuild.errors import StageError


def node_times(model: Any, device: str, repetitions: int = 20, warmup: int = 3
               ) -> dict[str, float]:
    """Seconds per call_function node of the recipe's exported graph, run on ``device``."""
    import torch

    from pimbuild import frontend

    recipe = frontend.build_recipe(model)
    prog = torch.export.export(recipe.module, tuple(recipe.inputs.values()), strict=False)
    gm = prog.module().to(device)
    inputs = [t.to(device) for t in recipe.inputs.values()]
    cuda = device.startswith("cuda")

    class Timed(torch.fx.Interpreter):
        times: dict[str, float]

        def run_node(self, n):
            if n.op != "call_function":
                return super().run_node(n)
            if cuda:
                start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
                start.record()
                out = super().run_node(n)
                end.record()
                end.synchronize()
                seconds = start.elapsed_time(end) / 1e3
            else:
                began = time.perf_counter()
                out = super().run_node(n)
                seconds = time.perf_counter() - began
            self.times[n.name] = self.times.get(n.name, 0.0) + seconds
            return out

    timer = Timed(gm)
    samples: dict[str, list[float]] = {}
    with torch.no_grad():
        for i in range(warmup + repetitions):
            timer.times = {}
            timer.run(*inputs)
            if i >= warmup:
                for name, seconds in timer.times.items():
                    samples.setdefault(name, []).append(seconds)
    return {name: min(v) for name, v in samples.items()}


def split(kernels: list[Any], nodes: dict[str, float], estimate: list[float]) -> list[float]:
    """Per kernel: the measured time of its nodes (see the module's docstring)."""
    by_node: dict[str, list[int]] = {}
    for k in kernels:
        by_node.setdefault(k.source_node, []).append(k.id)
    charged = {name: 0.0 for name in by_node}
    pending = 0.0
    for name, seconds in nodes.items():  # program order
        if name in by_node:
            charged[name] += pending + seconds
            pending = 0.0
        else:
            pending += seconds
    if pending and charged:  # trailing nodes without kernels: the last node that has some
        charged[list(charged)[-1]] += pending
    out = list(estimate)
    for name, ids in by_node.items():
        if name in nodes or charged[name]:
            total = sum(estimate[i] for i in ids) or 1.0
            for i in ids:
                out[i] = charged[name] * estimate[i] / total
    return out


def matches(device_name: str, gpu_name: str) -> bool:
    """Whether a configured device (``H100-SXM``) is this GPU (``NVIDIA H100 80GB HBM3``)."""
    return device_name.split("-")[0].upper() in gpu_name.upper()


def kernel_times(graph: Any, target: Any, model: Any, estimate: list[list[float]]
                 ) -> tuple[list[list[float]], list[str]]:
    """Times per kernel and device, and the devices measured (the rest: ``estimate``)."""
    import torch

    if not torch.cuda.is_available():
        raise StageError("profile", "profile.backend=cuda needs a CUDA GPU, and "
                         "torch.cuda.is_available() is false on this machine; use "
                         "profile.backend=roofline")
    gpu = torch.cuda.get_device_name()
    measured = [d.key for d in target.devices if matches(d.name, gpu)]
    if not measured:
        raise StageError("profile", f"this machine's GPU ({gpu}) is none of the configured "
                         f"devices ({', '.join(d.name for d in target.devices)}); measure "
                         f"with a matching device in `devices`, or use the roofline")
    nodes = node_times(model, "cuda")
    out = [list(row) for row in estimate]
    for d, device in enumerate(target.devices):
        if device.key in measured:
            column = split(list(graph.kernels), nodes, [row[d] for row in estimate])
            for k, t in enumerate(column):
                out[k][d] = t
    return out, measured
