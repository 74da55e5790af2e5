"""Counter backend ``timer``: no counts (C3 and C4 have nothing to judge)."""

from __future__ import annotations

from pimbuild.targets.offload.counters import CounterRun, empty_rows


def available(run: CounterRun) -> tuple[bool, str]:
    return True, "timer: no counters"


def count(run: CounterRun) -> list[dict]:
    return empty_rows(run, "timer")
