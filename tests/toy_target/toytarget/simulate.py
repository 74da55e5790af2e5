"""The toy target's ``simulate``: every nest's iterations at ``iterations_per_s``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toytarget import ToyTarget

NAME = "simulate"
READS = ("extract",)
WRITES = ("report.json",)


@dataclass(frozen=True)
class Params:
    target: ToyTarget


def params(cfg: Any) -> Params:
    return Params(target=ToyTarget.from_config(cfg))


def run(inputs: Any, p: Params, out: Path) -> None:
    nests = json.loads((inputs["extract"] / "candidates.json").read_text())["candidates"]
    iterations = sum(n["n_total"] for n in nests)
    seconds = iterations / p.target.iterations_per_s
    report = {"nests": len(nests), "iterations": iterations, "seconds": seconds,
              "summary": [f"toy: {len(nests)} nest(s), {iterations} iterations, "
                          f"{seconds:.3g} s"],
              "sweep_columns": {"seconds": f"{seconds:.3g}"},
              "headline": {"label": "seconds", "value": seconds}}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
