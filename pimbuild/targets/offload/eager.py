"""Stage ``eager``: the CPU-only program every speedup divides by, timed against the model in
PyTorch eager on this host (issue 13 item 8; docs/design.md §8).

A speedup over a host program slower than eager is inflated by the ratio of the two. This
stage runs instrument's ``forward.o`` (markers included: the program the profile stage times
and simulate's ``T_cpu-only`` comes from) and the model's eager forward on the same tensors,
alternately, on one thread, and writes ``eager.json``: their medians, the ratio and its
spread. Simulate divides the speedup by the ratio (``over_eager``). Its own stage, so that
the profile stage's cost (issue 13 item 7) is the profiling's alone, and so that changing the
counters does not time eager again.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from omegaconf import DictConfig

from pimbuild import frontend
from pimbuild.codegen.runtime import LIBRARY, Markers
from pimbuild.core.errors import ConfigError
from pimbuild.core.stage import Inputs, ModelParams
from pimbuild.frontend.lower import model_params
from pimbuild.targets.offload.profile import (
    MAX_REPETITIONS,
    Program,
    host_cpu,
    load_program,
    memory_state,
)

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

NAME = "eager"
READS = ("lower", "extract", "runtime", "instrument")
WRITES = ("eager.json",)


@dataclass(frozen=True)
class Params:
    model: ModelParams  # to rebuild the forward's arguments and the eager module
    rounds: int  # at least this many forwards of each (0: no comparison) ...
    min_time_s: float  # ... and more until the program's add up to this
    reuse_memory: bool  # as the profile stage times (``profile.reuse_freed_memory``)
    host: str  # the CPU measured on: measurements are not reused on another


def params(cfg: DictConfig) -> Params:
    pr = cfg.profile
    if pr.eager_rounds < 0:
        raise ConfigError(f"profile.eager_rounds is {pr.eager_rounds}; it counts forwards "
                          f"(0: no comparison with eager)")
    return Params(model=model_params(cfg), rounds=pr.eager_rounds, min_time_s=pr.min_time_s,
                  reuse_memory=pr.reuse_memory, host=host_cpu())


def run(inputs: Inputs, p: Params, out: Path) -> None:
    """Write ``eager.json``: ``comparison`` (``eager_comparison``'s, or null at 0 rounds)."""
    comparison = None
    if p.rounds:
        program = Program.from_artifacts(p.model, inputs["lower"], inputs["extract"],
                                         inputs["instrument"], inputs["runtime"])
        comparison = compare(program, p)
    (out / "eager.json").write_text(json.dumps({"comparison": comparison, "cpu": p.host},
                                               indent=2) + "\n")


def compare(program: Program, p: Params) -> dict[str, Any]:
    """``eager_comparison`` of the instrumented forward with the model's eager forward, on
    the tensors the forward's arguments were made from."""
    memory = memory_state(p.reuse_memory)
    markers = Markers(program.runtime_dir / LIBRARY)
    engine, loaded = load_program(program, markers)
    comparison = against_eager(engine, program.model, program.signature, p.rounds,
                               p.min_time_s)
    log.info("CPU-only program / PyTorch eager forward: %.2f (one thread, median of %d "
             "alternate rounds)", comparison["ratio"], comparison["rounds"])
    return {**comparison, "program": loaded, "memory": memory}


def against_eager(engine, model: ModelParams, signature: dict[str, Any], rounds: int,
                  min_time_s: float = 0.0) -> dict[str, Any]:
    """``eager_comparison`` of the compiled forward ``engine`` with the model's eager forward,
    on the tensors ``materialize_args`` made its arguments from."""
    from pimbuild.codegen import jit

    args = frontend.materialize_args(model, signature)
    recipe = frontend.materialized_recipe(model, signature)
    call, _ = jit.prepare(engine, signature["function"], args, signature["outputs"])
    return eager_comparison(call, recipe.module, list(recipe.inputs.values()), rounds,
                            min_time_s)


def eager_comparison(call: Callable[[], Any], module: torch.nn.Module, inputs: list[Any],
                     rounds: int, min_time_s: float = 0.0) -> dict[str, Any]:
    """The CPU-only program every speedup divides by, against PyTorch eager on the same
    tensors: a forward of each (``call``, the timed program; ``module`` on ``inputs``, no
    autograd) alternately, after one of each: ``rounds`` times, and more until the program's
    add up to ``min_time_s`` (at most ``MAX_REPETITIONS``). On one thread, as the lowered
    program runs; each timed from outside (eager's dispatch included). The two medians, and
    the ratio as the median of the rounds' own ratios (a round's two forwards ran back to
    back, under the same load) with its quartiles: how far it moves. A speedup over a host
    program slower than eager is inflated by this ratio. The module's buffers are restored
    after each forward, outside the timed region."""
    import torch  # here: a build with nothing to do imports no torch (tests/test_install.py)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    lowered, eager = [], []
    try:
        with torch.no_grad():
            while len(lowered) <= rounds or (sum(lowered[1:]) < min_time_s
                                              and len(lowered) <= MAX_REPETITIONS):
                t = time.perf_counter()
                call()
                lowered.append(time.perf_counter() - t)
                with frontend.kept_buffers(module):
                    t = time.perf_counter()
                    module(*inputs)
                    eager.append(time.perf_counter() - t)
    finally:
        torch.set_num_threads(threads)
    lo, ea = np.array(lowered[1:]), np.array(eager[1:])
    r25, r50, r75 = np.percentile(lo / ea, [25, 50, 75])
    return {"rounds": len(lo), "threads": 1, "lowered_median_s": float(np.median(lo)),
            "eager_median_s": float(np.median(ea)), "ratio": float(r50),
            "ratio_p25": float(r25), "ratio_p75": float(r75)}
