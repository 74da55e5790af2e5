"""A candidate nest as the decision rule and the simulator see it: extract's static facts
joined with profile's measurements (``candidates.json`` + ``timing.csv`` + ``counters.csv``)."""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Nest:
    """What the rule and the simulator know about one candidate (per forward)."""

    id: int
    source_op: str
    source_module: str
    source_node: str
    n_iter: int | float  # parallel iterations of one invocation (a mean where they vary)
    n_total: int | float  # iterations of one invocation, inner loops' too (likewise)
    invocations: int
    t_cpu_s: float  # time per forward, over its invocations (profile.estimator)
    bw_read_gbps: float | None
    store_bound: float | None
    reads: dict[str, int]
    writes: dict[str, int]
    op_mix: dict[str, int]
    # How far this host's lower-quartile repetition sits above the best (p25 / min - 1, the
    # measure calibrate uses for B_cpu): another run's T_cpu lands about this far away.
    t_spread: float = 0.0
    # A nest whose bounds vary with an enclosing loop (a triangular loop): each invocation's
    # exact (n_iter, n_total), in order; empty where every invocation is alike.
    per_invocation: tuple[tuple[int, int], ...] = ()
    # The op around the nest ("" for the function's body; ``loops.scopes``): a segment of
    # consecutive offloaded nests does not cross from one scope to another.
    scope: str = ""

    @property
    def moved_bytes(self) -> int:
        """Bytes of every buffer it reads or writes (one read and written counts once)."""
        return sum({**self.reads, **self.writes}.values())

    @property
    def operator(self) -> str:
        """The torch operator a nest came from: its module path and FX node."""
        return f"{self.source_module}|{self.source_node}"


def _number(text: str) -> float | None:
    return float(text) if text not in ("", None) else None


def load_nests(candidates_path: Path, timing_path: Path, counters_path: Path) -> list[Nest]:
    candidates = json.loads(candidates_path.read_text())["candidates"]
    with timing_path.open() as f:
        timing = {int(r["id"]): r for r in csv.DictReader(f)}
    with counters_path.open() as f:
        counters = {int(r["id"]): r for r in csv.DictReader(f)}
    return [Nest(id=c["id"], source_op=c["source_op"], source_module=c["source_module"],
                 source_node=c["source_node"], n_iter=c["n_iter"], n_total=c["n_total"],
                 invocations=int(timing[c["id"]]["invocations"]),
                 t_cpu_s=float(timing[c["id"]]["t_cpu_s"]),
                 bw_read_gbps=_number(counters[c["id"]]["bw_read_gbps"]),
                 store_bound=_number(counters[c["id"]]["store_bound"]),
                 reads=c["reads"], writes=c["writes"], op_mix=c["op_mix"],
                 t_spread=_spread(timing[c["id"]]),
                 per_invocation=tuple(tuple(pair) for pair in c.get("per_invocation", ())),
                 scope=c.get("scope", ""))
            for c in candidates]


def _spread(row: dict[str, str]) -> float:
    best, p25 = float(row["min_s"]), float(row["p25_s"])
    return max(p25 / best - 1, 0.0) if best > 0 else 0.0


def display_name(source_module: str, source_op: str) -> str:
    """``self_attn.q_proj.linear``: a nest's module path and torch operator, for people."""
    parts = source_op.split(".")
    op = parts[1] if len(parts) >= 2 and parts[0] == "aten" else source_op
    return f"{source_module}.{op}" if source_module else op


def outputs(candidates_path: Path) -> set[str]:
    """Allocation ids of the function's results (what must end up on the host)."""
    allocations = json.loads(candidates_path.read_text())["allocations"]
    return {a for a, info in allocations.items() if info["role"] == "output"}
