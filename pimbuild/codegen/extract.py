"""Stage ``extract``: one offloading candidate per top-level ``scf.parallel`` nest of
``scf.mlir`` (``pimbuild.codegen.loops``): its source torch operator, parallel dimensions and
``n_iter``, ``n_total``, enclosing trip count, the buffers it reads and writes by allocation,
and the op mix of one parallel iteration. Writes ``candidates.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from pimbuild.core.errors import StageError
from pimbuild.core.stage import Inputs

NAME = "extract"
READS = ("lower",)
WRITES = ("candidates.json",)


@dataclass(frozen=True)
class Params:
    """extract reads no configuration: its key is its input's."""


def params(cfg: DictConfig) -> Params:
    return Params()


def run(inputs: Inputs, p: Params, out: Path) -> None:
    from pimbuild.codegen import loops

    lower = inputs["lower"]
    try:
        result = loops.extract(lower / "scf.mlir",
                               json.loads((lower / "signature.json").read_text()))
    except ValueError as e:  # a loop whose bounds are not constants
        raise StageError(NAME, f"{e} (in {lower / 'scf.mlir'})") from None
    (out / "candidates.json").write_text(json.dumps(result, indent=2) + "\n")
