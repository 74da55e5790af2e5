"""A counter backend of one's own with one typed option (tests/test_plugin_options.py): every
nest reads ``profile.backend_options.lines`` cache lines from memory per forward. This file
is all it takes."""

from __future__ import annotations

from dataclasses import dataclass, field

from pimbuild.targets.offload.counters import CounterRun


@dataclass(frozen=True)
class Options:
    lines: int = field(default=0, metadata={"range": (">=", 0)})


def available(run: CounterRun) -> tuple[bool, str]:
    return True, "fixed_reads: no run"


def count(run: CounterRun) -> list[dict]:
    lines = run.options.lines
    return [{"id": c["id"], "source_op": c["source_op"], "counter_source": "fixed_reads",
             "counts": {"offcore_data_rd": lines}} for c in run.program.candidates]
