"""Stage ``extract`` of the GPU target: the kernels of ``linalg.mlir``
(``pimbuild.targets.gpus.program.kernels``: one per linalg op after fusion, with FLOPs, bytes
by buffer and class) and the model's structure (``layers``, ``tokens``) from lower's signature.
``gpus.kernels=engine`` (the default) groups them into the kernels a serving engine launches
(``pimbuild.targets.gpus.program.fusion``: fused attention, merged QKV and gate+up GEMMs,
fused norms, RoPE, activation-and-mul), keeping the lowered ones under ``lowered``;
``lowered`` keeps one kernel per linalg op. Writes ``kernels.json``; the data dependency graph
is derived from it (``pimbuild.targets.gpus.costmodel.ddg.build``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pimbuild.core.errors import ConfigError, StageError
from pimbuild.core.stage import Inputs
from pimbuild.targets.gpus.program import fusion

NAME = "extract"
READS = ("lower",)
WRITES = ("kernels.json",)
VIEWS = ("engine", "lowered")


@dataclass(frozen=True)
class Params:
    kernels: str = "engine"  # engine | lowered


def params(cfg: Any) -> Params:
    view = cfg.gpus.kernels
    if view not in VIEWS:
        raise ConfigError(f"gpus.kernels '{view}' is not one of {', '.join(VIEWS)} (engine: "
                          f"the kernels a serving engine launches; lowered: one per linalg op)")
    return Params(kernels=view)


def run(inputs: Inputs, p: Params, out: Path) -> None:
    from pimbuild.targets.gpus.program import kernels

    lower = inputs["lower"]
    signature = json.loads((lower / "signature.json").read_text())
    result = kernels.analyze(lower / "linalg.mlir", signature)
    if not result["kernels"]:
        raise StageError("extract", "the forward launches no kernel (it only returns or "
                                    "reshapes its inputs): nothing to place on the GPUs")
    # the forward's inputs and the buffers it writes in place (state), by source name
    written = signature.get("mutations", {})
    inputs = {a["source"]: f"arg{i}" for i, a in enumerate(signature["args"])
              if a["kind"] == "input" or a["source"] in written}
    outputs = result["outputs"]
    result.update({key: signature.get(key, default) for key, default in (
        ("layers", 1), ("tokens", 1), ("unit", "tokens"), ("forwards_per_request", 1),
        ("prompt", 0))})
    for key in ("carry", "state"):  # by buffer: input -> the result that feeds it
        result[key] = {inputs[name]: outputs[j]
                       for name, j in signature.get(key, {}).items()
                       if outputs[j] and name in inputs}
    if p.kernels == "engine":
        result = fusion.engine(result, signature)
    (out / "kernels.json").write_text(json.dumps(result, indent=2) + "\n")
