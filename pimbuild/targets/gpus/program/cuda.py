"""Kernel time backend ``cuda``: kernel times measured on this machine's GPU.

Where ``torch.cuda.is_available()`` is false it refuses with a StageError naming why. Where it
is true, the recipe's exported graph (before decomposition: its node names are the
``source_node`` of extract's kernels) runs node by node on the GPU under a ``torch.fx``
interpreter, each node between two CUDA events; a node's time is the minimum over
``repetitions`` runs after ``warmup``. A busy-wait kernel queued before each start event keeps
the GPU busy while the CPU dispatches the node, so the events time the GPU's work and not the
interpreter; what two events read with nothing between them (``event_floor_s`` in
``profile.json``) is subtracted from each node, so that a node that launches nothing (a view)
reads about 0. The graph runs in the served precision (``gpus.precision``: its parameters and
floating inputs cast) where every node accepts it, else in fp32; ``profile.json`` records
which (``measured_precision``). A kernel then gets the time of the nodes it came from,
split between the kernels of one node in proportion to their roofline times; a node no kernel
names (fusion merged it into a consumer) is charged to the next node that has kernels. Only
the configured devices this GPU is (``matches``: ``H100-SXM`` is ``NVIDIA H100 80GB HBM3``)
are measured; the others keep their roofline times, and ``profile.json`` says which.

Measured on an NVIDIA H200 with ``bench/cuda_profile.py`` (docs/design.md §10); CI has no GPU,
so the tests run the node timing and the split on the CPU (``device="cpu"``, wall clock).
"""

from __future__ import annotations

import time
from typing import Any

from pimbuild import frontend
from pimbuild.core.errors import StageError

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# A busy-wait kernel enqueued before each node's start event, so that the GPU is still busy
# while the CPU walks the interpreter and dispatches the node: the events then time the node's
# kernels, not Python. About 0.1 ms at 2 GHz, longer than one node's dispatch.
SLEEP_CYCLES = 200_000


def served(gm: Any, inputs: list[Any], precision: str) -> tuple[Any, list[Any], str]:
    """The exported module and inputs in the served precision (floating tensors only), if
    the graph runs in it; else as exported (an op that fixes its dtype, say an fp32 upcast,
    can make mixed-precision arithmetic fail). Returns the precision that runs."""
    import torch

    dtype = getattr(torch, TORCH_DTYPES[precision])
    cast = [t.to(dtype) if t.is_floating_point() else t for t in inputs]
    try:
        with torch.no_grad():
            gm.to(dtype)(*cast)  # Module.to casts in place
        return gm, cast, precision
    except Exception:  # any op of the user's graph may refuse the dtype
        return gm.to(torch.float32), inputs, "fp32"


def span(fn: Any) -> tuple[Any, float]:
    """``fn()`` on the GPU between two CUDA events, the GPU kept busy while the CPU
    dispatches it: its result and the seconds between the events."""
    import torch

    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    torch.cuda._sleep(SLEEP_CYCLES)
    start.record()
    out = fn()
    end.record()
    end.synchronize()
    return out, start.elapsed_time(end) / 1e3


def event_floor(samples: int = 50) -> float:
    """Seconds two CUDA events read with nothing between them (subtracted from each node)."""
    return min(span(lambda: None)[1] for _ in range(samples))


def node_times(model: Any, device: str, repetitions: int = 20, warmup: int = 3,
               precision: str = "fp32") -> tuple[dict[str, float], dict[str, Any]]:
    """Seconds per call_function node of the recipe's exported graph, run on ``device`` in
    ``precision`` where the graph runs in it; and how: the precision it ran in and, on a GPU,
    the event floor subtracted from every node."""
    import torch

    recipe = frontend.build_recipe(model)
    prog = torch.export.export(recipe.module, tuple(recipe.inputs.values()), strict=False)
    gm = prog.module().to(device)
    gm, inputs, ran = served(gm, [t.to(device) for t in recipe.inputs.values()], precision)
    cuda = device.startswith("cuda")
    floor = event_floor() if cuda else 0.0

    class Timed(torch.fx.Interpreter):
        times: dict[str, float]

        def run_node(self, n):
            if n.op != "call_function":
                return super().run_node(n)
            if cuda:
                out, seconds = span(lambda: super(Timed, self).run_node(n))
                seconds = max(0.0, seconds - floor)
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
    return {name: min(v) for name, v in samples.items()}, {"measured_precision": ran,
                                                           "event_floor_s": floor}


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
    """Whether a configured device (``A100-80GB-SXM``) is this GPU (``NVIDIA A100-SXM4-80GB``):
    every part of the device's name that holds a digit is a whole word of the GPU's name. So
    ``L4`` is not an L40S, ``A100-80GB`` not a 40 GB A100, ``RTX-PRO-6000`` not an RTX 4090;
    the form factor (``SXM``), which the GPU's name may leave out, does not count."""
    words = set(gpu_name.upper().replace("-", " ").split())
    parts = [p for p in device_name.upper().split("-") if any(c.isdigit() for c in p)]
    return bool(parts) and all(p in words for p in parts)


def versions() -> dict[str, str]:
    """The torch, CUDA and driver versions a measurement ran under (a table records them)."""
    import subprocess

    import torch

    try:
        driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version",
                                 "--format=csv,noheader"], capture_output=True, text=True,
                                timeout=30, check=False).stdout.strip().split("\n")[0]
    except (OSError, subprocess.TimeoutExpired):
        driver = ""
    return {"torch": torch.__version__, "cuda": torch.version.cuda or "", "driver": driver}


def kernel_times(graph: Any, target: Any, model: Any, estimate: list[list[float]]
                 ) -> tuple[list[list[float]], dict[str, Any]]:
    """Times per kernel and device (the devices not measured: ``estimate``), and what was
    measured: the devices, the GPU, the precision the graph ran in, how many kernels have a
    timed node of their own and the seconds of nodes that have none (charged onward)."""
    import torch

    if not torch.cuda.is_available():
        raise StageError("profile", "gpus.backend=cuda needs a CUDA GPU, and "
                         "torch.cuda.is_available() is false on this machine; use "
                         "gpus.backend=roofline")
    gpu = torch.cuda.get_device_name()
    measured = [d.key for d in target.devices if matches(d.name, gpu)]
    if not measured:
        raise StageError("profile", f"this machine's GPU ({gpu}) is none of the configured "
                         f"devices ({', '.join(d.name for d in target.devices)}); measure "
                         f"with a matching device in `devices`, or use the roofline")
    nodes, how = node_times(model, "cuda", precision=target.precision)
    out = [list(row) for row in estimate]
    for d, device in enumerate(target.devices):
        if device.key in measured:
            column = split(list(graph.kernels), nodes, [row[d] for row in estimate])
            for k, t in enumerate(column):
                out[k][d] = t
    sources = {k.source_node for k in graph.kernels}
    return out, {"measured": measured, "gpu": gpu, **how, **versions(),
                 "method": "each torch node between CUDA events after a busy-wait, min of 20 "
                           "after 3 warm-ups, event floor subtracted; split over its kernels "
                           "by roofline share",
                 "nodes_timed": len(nodes),
                 "kernels_with_timed_node": sum(k.source_node in nodes for k in graph.kernels),
                 "seconds_of_nodes_without_kernels": sum(
                     t for name, t in nodes.items() if name not in sources),
                 "seconds_timed": sum(nodes.values())}
