"""What the PIM profile stage and its counter backends share: the stage's parameters
(``Params``) and the instrumented program it measures (``Program``), below both."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pimbuild.core.stage import ModelParams


@dataclass(frozen=True)
class Params:
    model: ModelParams  # to rebuild the forward's arguments
    backend: str  # a counter backend, or auto
    auto: tuple[str, ...]  # what auto tries, in order
    repetitions: int  # at least this many timed forwards ...
    min_time_s: float  # ... and more until they add up to this
    warmup: int
    estimator: str  # how T_cpu is taken from the repetitions (ESTIMATORS)
    events: dict[str, str]  # role -> PAPI event name
    cache_line: int
    l1d_bytes: int
    l1d_assoc: int
    llc_bytes: int
    llc_assoc: int
    l2_bytes: int
    l2_assoc: int
    valgrind_last_level: str  # llc | l2
    valgrind_warm: bool
    host: str  # the CPU measured on: measurements are not reused on another
    reuse_memory: bool = True  # time in the steady state of the allocator (reuse_freed_memory)
    # the named backend's own options (profile.backend_options), checked; CounterRun.options
    backend_options: dict[str, Any] = field(default_factory=dict)

    @property
    def last_level(self) -> tuple[int, int]:
        """(bytes, ways) of the cache whose misses the valgrind and footprint backends count:
        the LLC, or with ``valgrind_last_level=l2`` the core's L2."""
        if self.valgrind_last_level == "l2":
            return self.l2_bytes, self.l2_assoc
        return self.llc_bytes, self.llc_assoc



@dataclass
class Program:
    """The instrumented program a profile run measures, and what it needs to run it."""

    model: ModelParams
    signature: dict[str, Any]
    candidates: list[dict[str, Any]]
    llvm_path: Path
    object_path: Path  # forward.o: llvm.mlir compiled by instrument
    runtime_dir: Path

    @classmethod
    def from_artifacts(cls, model: ModelParams, lower_dir: Path, extract_dir: Path,
                       instrument_dir: Path, runtime_dir: Path) -> Program:
        return cls(model=model,
                   signature=json.loads((lower_dir / "signature.json").read_text()),
                   candidates=nest_candidates(extract_dir, instrument_dir),
                   llvm_path=instrument_dir / "llvm.mlir",
                   object_path=instrument_dir / "forward.o", runtime_dir=runtime_dir)


def nest_candidates(extract_dir: Path, instrument_dir: Path) -> list[dict[str, Any]]:
    """Extract's candidates, each with ``row_block``: how many rows of a product the compiled
    code reads each shared operand for (instrument's ``codegen.json`` ``rows``; 1 if none),
    and where code generation packed panels for it, ``column_block``: the columns of each
    (``panel_columns``)."""
    codegen = json.loads((instrument_dir / "codegen.json").read_text())
    rows, columns = codegen.get("rows", {}), codegen.get("panel_columns", {})
    return [{**c, "row_block": rows.get(str(c["id"]), 1),
             **({"column_block": columns[str(c["id"])]} if str(c["id"]) in columns else {})}
            for c in json.loads((extract_dir / "candidates.json").read_text())["candidates"]]
