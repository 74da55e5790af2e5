"""A toy target, added from outside pimbuild: a forward costs its loop nests' iterations at a
fixed rate. Its whole definition is this package and ``conf/system/toy.yaml``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar


@dataclass(frozen=True)
class ToyTarget:
    iterations_per_s: float

    # pimbuild's shared lower and extract, then a stage of its own
    pipeline: ClassVar[dict[str, str]] = {"lower": "pimbuild.frontend.lower",
                                          "extract": "pimbuild.codegen.extract",
                                          "simulate": "toytarget.simulate"}

    @classmethod
    def from_config(cls, cfg: Any) -> ToyTarget:
        return cls(iterations_per_s=float(cfg.system.params.iterations_per_s))

    @classmethod
    def summarize(cls, cfg: Any, dirs: dict[str, Path], width: int) -> list[Any]:
        if "simulate" not in dirs:
            return []
        return json.loads((dirs["simulate"] / "report.json").read_text())["summary"]


TARGET = ToyTarget
