"""Counter backends: per-nest event counts for the profile stage's counter run.

A backend is a module with ``available(run) -> (bool, why)`` and ``count(run) -> rows``, one
row per candidate: ``{"id", "source_op", "counter_source", "counts": {role: count}}``, the
counts per forward. ``profile.backend`` names one in ``BACKENDS`` (a module
``pimbuild/targets/offload/counters/<name>.py``, or ``package.module``); ``auto`` tries
``profile.auto`` in
order. Built in: ``papi`` (the platform's PAPI events, read in the C markers), ``valgrind``
(callgrind's cache simulation), ``footprint`` (valgrind's counts modelled from each nest's
buffers, no run), ``timer`` (no counts). A backend with options of its own declares a
dataclass ``Options`` in its module; ``profile.backend_options`` holds their values (checked
like a config group; only with the backend named, not ``auto``), read as ``run.options``
(the chosen backend's defaults under ``auto``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pimbuild.core.registry import Registry

if TYPE_CHECKING:
    import numpy as np

    from pimbuild.codegen.runtime import Markers
    from pimbuild.targets.offload.program import Params, Program

BACKENDS = Registry("counter backend", "profile.backend",
                    package="pimbuild.targets.offload.counters")


@dataclass
class CounterRun:
    """What a backend may use: the compiled program, the marker runtime, the arguments of
    one forward, the profile stage's params and the artifact folder it may write into."""

    engine: Any  # an ExecutionEngine with the instrumented forward
    markers: Markers
    program: Program
    args: list[np.ndarray]
    params: Params
    out_dir: Path
    options: Any = None  # the chosen backend's Options, where it declares them


def empty_rows(run: CounterRun, source: str) -> list[dict]:
    return [{"id": c["id"], "source_op": c["source_op"], "counter_source": source,
             "counts": {}} for c in run.program.candidates]
