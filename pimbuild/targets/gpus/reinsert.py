"""Stage ``reinsert`` of the GPU target: the partitioned program, run for real and checked.

Every kernel becomes a function (``pimbuild.targets.gpus.program.partition``: ``partition.mlir``,
lowered to ``partition_llvm.mlir`` and compiled once to ``partition.o``, which every worker
links and loads); ``pimbuild.targets.gpus.program.workers`` runs one process per device, each
executing the kernels decide placed on it and exchanging exactly the transfers of the
dependency graph (one forward: inputs enter at home, results return there). The stage fails
unless the results match PyTorch eager (``pimbuild.core.check.judge``: within its tolerance, or
no further from a float64 run of the model than eager). A placement of
``gpus.period`` layers is checked layer by layer: every distinct placement of one layer among
them is run and checked (the hidden state carried between layers is one buffer, which the
cost model moves and the check does not). Writes ``partition.json`` (each kernel's function and
buffers, and per distinct layer placement the device of every kernel and the transfer list)
and ``reinsert.json`` (the check).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from pimbuild import frontend
from pimbuild.codegen.runtime import compiler
from pimbuild.core.check import judge, referee_note
from pimbuild.core.errors import StageError
from pimbuild.core.stage import Inputs, ModelParams
from pimbuild.frontend.lower import model_params
from pimbuild.targets.gpus.costmodel import ddg
from pimbuild.targets.gpus.program import fusion, workers

NAME = "reinsert"
READS = ("lower", "extract", "decide")
WRITES = ("partition.mlir", "partition_llvm.mlir", "partition.o", "partition.json",
          "reinsert.json")


@dataclass(frozen=True)
class Params:
    model: ModelParams  # to rebuild the forward's arguments and eager's outputs


def params(cfg: DictConfig) -> Params:
    return Params(model=model_params(cfg))


def compile_partition(lower: Path, out: Path, failure_dir: Path) -> list[dict]:
    from pimbuild.codegen import jit
    from pimbuild.frontend import mlir
    from pimbuild.targets.gpus.program import partition

    signature = json.loads((lower / "signature.json").read_text())
    module, specs = partition.build(lower / "linalg.mlir", signature)
    mlir.write_ir(module, out / "partition.mlir")
    to_scf = mlir.TM_TENSOR_TO_SCF if mlir.has_dialect(module, "tm_tensor") else \
        mlir.LINALG_TO_SCF
    mlir.run_pipeline(module, to_scf, stage=NAME, failure_dir=failure_dir)
    jit.to_llvm(module, 1, stage=NAME, failure_dir=failure_dir)
    mlir.write_ir(module, out / "partition_llvm.mlir")
    jit.write_object(module, {}, out / "partition.o")  # compiled once, for every worker
    return specs


def linkable(obj: Path) -> tuple[tuple[Path, str] | None, str]:
    """What the workers load and how that reads in ``reinsert.json``: ``obj`` linked by the
    system C compiler (tried here first), or, where the link or load is refused, the LLVM
    dialect compiled by each worker."""
    from pimbuild.codegen import jit

    linked, why = jit.try_load_object(obj, [])
    if linked is None:
        return None, f"partition_llvm.mlir compiled by each worker ({why})"
    return (obj, compiler()), "partition.o linked by each worker"


def check(results, expected, signature: dict,
          exact: Callable[[], list[np.ndarray] | None] | None = None) -> dict:
    """``check.judge``'s verdict on a partitioned run's results, with each output's error."""
    # a result that is a reshaping view of a kernel's buffer
    shaped = [got.reshape(want.shape) if got.size == want.size else got
              for got, want in zip(results, expected, strict=True)]
    return judge(shaped, expected, signature, exact) | {"outputs": len(signature["outputs"])}


def layer_placements(place: list[int], n: int) -> dict[tuple[int, ...], list[int]]:
    """The distinct placements of one layer (``n`` kernels) in a placement of whole layers,
    each with the layers that have it."""
    distinct: dict[tuple[int, ...], list[int]] = {}
    for i in range(len(place) // n):
        distinct.setdefault(tuple(place[i * n:(i + 1) * n]), []).append(i)
    return distinct


def run(inputs: Inputs, p: Params, out: Path) -> None:
    lower, extract = inputs["lower"], inputs["extract"]
    signature = json.loads((lower / "signature.json").read_text())
    data = json.loads((extract / "kernels.json").read_text())
    placement = json.loads((inputs["decide"] / "placement.json").read_text())
    n_dev = len(placement["devices"])
    # engine kernels run as their lowered members, each on its engine kernel's device
    place = fusion.lowered_place(data, placement["place"])
    data = {**data, "kernels": data.get("lowered", data["kernels"])}
    graph = ddg.build(data, layers=0)  # one forward: inputs from home, results back home
    distinct = layer_placements(place, len(graph.kernels))
    moves = {place: ddg.transfers(graph, list(place)) for place in distinct}
    specs = compile_partition(lower, out, inputs.failure_dir)
    args, expected = frontend.materialize(p.model, signature)
    exact = functools.cache(lambda: frontend.reference64(p.model, signature))
    buffers = workers.buffer_table(specs, signature)
    named = {f"arg{i}": a for i, a in enumerate(args)}
    (out / "partition.json").write_text(json.dumps(
        {"devices": placement["devices"], "kernels": specs,
         "placements": [{"layers": layers, "place": list(place),
                         "transfers": [{"buffer": b, "from": s, "to": d, "bytes": n}
                                       for b, s, d, n in moves[place]]}
                        for place, layers in distinct.items()]},
        indent=2) + "\n")
    compiled, program = linkable(out / "partition.o")
    checks = []
    for place in distinct:
        results = workers.run(out / "partition_llvm.mlir", specs, list(place), moves[place],
                              buffers, named, set(graph.inputs), list(data["outputs"]), n_dev,
                              compiled)
        checks.append(check(results, expected, signature, exact))
    worst = max(checks, key=lambda c: (not c["passed"], c["max_rel_error"]))
    every = [m for place in distinct for m in moves[place]]
    result = worst | {
        "placements": len(distinct), "transfers": len(every),
        "transfer_bytes": sum(m[3] for m in every), "processes": n_dev, "program": program}
    (out / "reinsert.json").write_text(json.dumps(result, indent=2) + "\n")
    if not result["passed"]:
        raise StageError(NAME, f"the partitioned program differs from PyTorch eager: max "
                               f"relative error {result['max_rel_error']:.3g} > "
                               f"{result['rtol']:.3g} ({result['where']})"
                               f"{referee_note(result)}")
