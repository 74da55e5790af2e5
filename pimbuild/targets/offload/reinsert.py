"""Stage ``reinsert``: the hybrid program.

Consecutive offloaded nests form segments; every offloaded nest is outlined into a function
and each segment bracketed by the target's boundary calls
(``pimbuild.targets.offload.outline``, names from
the target's ``Boundary``). The hybrid program is compiled and run on the host with the marker
runtime and must match PyTorch eager (``pimbuild.core.check.judge``); its transitions are counted
(``N_region``). Writes ``hybrid.mlir``, ``hybrid_llvm.mlir``, ``hybrid.o`` and ``reinsert.json``.

The hybrid program depends on which nests are offloaded, not on why: placements that come
out the same (a theta sweep, a core count that changes nothing) share one build through the
store's run cache.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from pimbuild import frontend, targets
from pimbuild.codegen.runtime import LIBRARY, Markers
from pimbuild.core.artifacts import run_cache
from pimbuild.core.check import judge, referee_note
from pimbuild.core.errors import StageError
from pimbuild.core.stage import Inputs, ModelParams
from pimbuild.frontend.lower import model_params
from pimbuild.targets.offload import instrument
from pimbuild.targets.offload.hostfacts import resolved_block
from pimbuild.targets.offload.protocol import Boundary

NAME = "reinsert"
READS = ("lower", "runtime", "calibrate", "decide")
WRITES = ("hybrid.mlir", "hybrid_llvm.mlir", "hybrid.o", "reinsert.json")


@dataclass(frozen=True)
class Params:
    model: ModelParams  # to rebuild the forward's arguments and eager's outputs
    register_block: int | None  # host code generation, as instrument
    boundary: Boundary  # what the target needs at a segment's boundary


def params(cfg: DictConfig) -> Params:
    return Params(model=model_params(cfg), register_block=cfg.lowering.register_block,
                  boundary=targets.from_config(cfg).boundary)


def check(engine, markers, signature: dict, args: list[np.ndarray],
          expected: list[np.ndarray], exact: Callable[[], list[np.ndarray] | None]) -> dict:
    """``check.judge``'s verdict on the program's results, and its transitions counted."""
    from pimbuild.codegen import jit

    markers.reset()
    results = jit.invoke(engine, signature["function"], args, signature["outputs"])
    return judge(results, expected, signature, exact) | {"transitions": markers.transitions()}


def unpartitioned(lower_dir: Path, signature: dict, block: int, markers,
                  args: list[np.ndarray], expected: list[np.ndarray],
                  exact: Callable[[], list[np.ndarray] | None], failure_dir: Path) -> dict:
    """The eager check of the program with no nest offloaded: after a failed check, it tells
    a lowering's inaccuracy from a partition's error."""
    from pimbuild.codegen import jit

    engine = jit.compile_scf(lower_dir / "scf.mlir", failure_dir, block)
    return check(engine, markers, signature, args, expected, exact)


def build(lower_dir: Path, offloaded: set[int], runtime_lib: Path, p: Params, block: int,
          out: Path, failure_dir: Path) -> None:
    from pimbuild.codegen import jit
    from pimbuild.frontend import mlir
    from pimbuild.targets.offload import outline

    signature = json.loads((lower_dir / "signature.json").read_text())
    module = mlir.parse_file(lower_dir / "scf.mlir")
    segments, transitions = outline.reinsert(module, signature["function"], offloaded,
                                             p.boundary)
    mlir.write_ir(module, out / "hybrid.mlir")
    jit.to_llvm(module, block, stage=NAME, failure_dir=failure_dir)
    markers = Markers(runtime_lib)
    (out / "hybrid_llvm.mlir").write_text(mlir.asm(module) + "\n")
    symbols = markers.symbols([instrument.ENTER, instrument.EXIT, p.boundary.begin,
                               p.boundary.end])
    engine = jit.write_object(module, symbols, out / "hybrid.o")
    args, expected = frontend.materialize(p.model, signature)
    exact = functools.cache(lambda: frontend.reference64(p.model, signature))
    result = check(engine, markers, signature, args, expected, exact)
    report = {"segments": segments, "n_region": transitions,
              "outlined": sorted(offloaded), "check": result}
    (out / "reinsert.json").write_text(json.dumps(report, indent=2) + "\n")
    if not result["passed"]:
        before = unpartitioned(lower_dir, signature, block, markers, args, expected, exact,
                               failure_dir)
        error = before["max_rel_error"]
        why = (f"the lowered program before partitioning already differs by {error:.3g}, so "
               f"the lowering (torch-mlir, LLVM), not the partition, computes this model "
               f"differently" if not before["passed"] else
               f"the lowered program before partitioning matches ({error:.3g}), so the "
               f"partition changed the result")
        raise StageError(NAME, f"the hybrid program differs from PyTorch eager: max "
                               f"relative error {result['max_rel_error']:.3g} > "
                               f"{result['rtol']:.3g} ({result['where']})"
                               f"{referee_note(result)}; {why}")
    if result["transitions"] != transitions:
        raise StageError(NAME, f"the hybrid program made {result['transitions']} "
                               f"transitions to and from {p.boundary.device}, expected "
                               f"{transitions}")


def run(inputs: Inputs, p: Params, out: Path) -> None:
    offloaded = json.loads((inputs["decide"] / "decisions.json").read_text())["offloaded"]
    block = resolved_block(p.register_block, inputs["calibrate"])
    content = {"lower": inputs.keys["lower"], "runtime": inputs.keys["runtime"],
               "register_block": block, "boundary": asdict(p.boundary),
               "offloaded": sorted(offloaded)}
    run_cache(inputs.store, NAME, content, out, lambda tmp: build(
        inputs["lower"], set(offloaded), inputs["runtime"] / LIBRARY, p, block, tmp,
        inputs.failure_dir))
