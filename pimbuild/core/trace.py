"""Timelines in the Trace Event format (the JSON that Perfetto, ``ui.perfetto.dev``, and
Chromium's ``chrome://tracing`` open): a simulated schedule as tracks (a process per machine
part, a thread per lane) of complete events with their start and length. Plain JSON: no
dependency; ``check`` reads a file back and counts what it holds.

A ``Trace`` collects events in seconds and writes microseconds, as the format wants.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OPEN_WITH = "open it in https://ui.perfetto.dev or chrome://tracing"


@dataclass
class Trace:
    events: list[dict[str, Any]] = field(default_factory=list)
    _pids: dict[str, int] = field(default_factory=dict)
    _tids: dict[tuple[str, str], int] = field(default_factory=dict)

    def track(self, process: str, lane: str) -> tuple[int, int]:
        """The (pid, tid) of ``lane`` in ``process``, both named on first use."""
        if process not in self._pids:
            self._pids[process] = len(self._pids) + 1
            self.events.append({"ph": "M", "name": "process_name", "pid": self._pids[process],
                                "tid": 0, "args": {"name": process}})
        pid = self._pids[process]
        if (process, lane) not in self._tids:
            self._tids[(process, lane)] = 1 + sum(p == process for p, _ in self._tids)
            self.events.append({"ph": "M", "name": "thread_name", "pid": pid,
                                "tid": self._tids[(process, lane)], "args": {"name": lane}})
        return pid, self._tids[(process, lane)]

    def span(self, process: str, lane: str, name: str, start_s: float, seconds: float,
             category: str = "", **args: Any) -> None:
        """A complete event: ``name`` on ``lane`` from ``start_s`` for ``seconds``."""
        pid, tid = self.track(process, lane)
        self.events.append({"ph": "X", "name": name, "cat": category or lane, "pid": pid,
                            "tid": tid, "ts": start_s * 1e6, "dur": seconds * 1e6,
                            **({"args": args} if args else {})})

    def instant(self, process: str, lane: str, name: str, at_s: float, **args: Any) -> None:
        pid, tid = self.track(process, lane)
        self.events.append({"ph": "i", "s": "t", "name": name, "pid": pid, "tid": tid,
                            "ts": at_s * 1e6, **({"args": args} if args else {})})

    def write(self, path: Path, **metadata: Any) -> dict[str, int]:
        """Write the file; what ``check`` counts in it."""
        path.write_text(json.dumps({"traceEvents": self.events, "displayTimeUnit": "ns",
                                    "metadata": metadata}) + "\n")
        return check(path)


def check(path: Path) -> dict[str, int]:
    """Read a trace back: every event well formed (a phase, a name, integer ids, a start and
    a length of at least zero), and the count of events by category (``spans`` in all,
    ``tracks`` named). A ValueError names the first event that is not."""
    data = json.loads(path.read_text())
    counts: Counter[str] = Counter()
    for i, e in enumerate(data["traceEvents"]):
        if e.get("ph") not in ("X", "M", "i") or not isinstance(e.get("name"), str) \
                or not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int):
            raise ValueError(f"{path}: event {i} is not a trace event: {e}")
        if e["ph"] == "M":
            counts["tracks"] += e["name"] == "thread_name"
            continue
        if not (e["ts"] >= 0 and e.get("dur", 0) >= 0):
            raise ValueError(f"{path}: event {i} starts or lasts below zero: {e}")
        counts["spans" if e["ph"] == "X" else "instants"] += 1
        counts[e.get("cat", e["name"])] += 1
    return dict(counts)
