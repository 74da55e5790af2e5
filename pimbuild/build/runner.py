"""Run stage tasks with doit's API; report each task as it finishes.

doit orders the tasks (``task_dep`` on the artifacts a stage reads) and asks each whether it
is up to date; the answer is the store's (``Artifact.complete``: published and intact), never
doit's own database, which is only a cache: deleting it or copying the store elsewhere costs
nothing and misreports nothing. A task doit runs reports what the store did: built, reused
(another process published it meanwhile) or repaired (a damaged artifact was rebuilt).
"""

from __future__ import annotations

import errno
import shutil
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from doit.cmd_base import ModuleTaskLoader
from doit.doit_cmd import DoitMain
from doit.exceptions import TaskFailed
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from pimbuild.build.graph import StageTask
from pimbuild.core.artifacts import Store
from pimbuild.core.errors import PimbuildError, StoreError


@dataclass
class Outcome:
    executed: list[str] = field(default_factory=list)  # tasks whose artifact was produced
    cached: list[str] = field(default_factory=list)  # tasks whose artifact was reused
    repaired: dict[str, str] = field(default_factory=dict)  # task -> what was wrong
    status: dict[str, str] = field(default_factory=dict)  # task -> Store.build's answer
    seconds: dict[str, float] = field(default_factory=dict)
    error: BaseException | None = None


class Display:
    """One row per task: a live progress display on a terminal, else one line per task as
    it finishes (logs and pipes see progress as it happens)."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.live = console.is_terminal
        self.progress = Progress(SpinnerColumn(finished_text=""), TextColumn("{task.description}"),
                                 TimeElapsedColumn(), console=console, transient=False,
                                 disable=not self.live)
        self.rows: dict[str, int] = {}

    def start(self, name: str) -> None:
        if self.live:
            self.rows[name] = self.progress.add_task(f"{name}  building", total=None)

    def finish(self, name: str, text: str, seconds: float | None = None) -> None:
        elapsed = f"  {seconds:.1f} s" if seconds is not None else ""
        if not self.live:
            self.console.print(f"{name}  {text}{elapsed}", soft_wrap=True)
        elif name in self.rows:
            self.progress.update(self.rows[name], total=1, completed=1,
                                 description=f"{name}  {text}")
        else:
            self.rows[name] = self.progress.add_task(f"{name}  {text}", total=1, completed=1)


def _reporter(display: Display, outcome: Outcome):
    """A doit reporter class bound to ``display`` and ``outcome``."""

    class Reporter:
        def __init__(self, outstream, options) -> None:
            self.start: dict[str, float] = {}

        def initialize(self, tasks, selected_tasks) -> None:
            pass

        def get_status(self, task) -> None:
            pass

        def execute_task(self, task) -> None:
            self.start[task.name] = time.perf_counter()
            display.start(task.name)

        def _seconds(self, task) -> float:
            seconds = time.perf_counter() - self.start.get(task.name, time.perf_counter())
            outcome.seconds[task.name] = seconds
            return seconds

        def add_success(self, task) -> None:
            status = outcome.status.get(task.name, "built")
            seconds = self._seconds(task)
            if status == "reused":
                outcome.cached.append(task.name)
                display.finish(task.name, "[green]✓[/] reused (published meanwhile by "
                                          "another build)", seconds)
                return
            outcome.executed.append(task.name)
            if status.startswith("repaired"):
                why = status.partition(": ")[2]
                outcome.repaired[task.name] = why
                display.finish(task.name, f"[yellow]✓ repaired[/] ({why})", seconds)
            else:
                display.finish(task.name, "[green]✓ built[/]", seconds)

        def add_failure(self, task, fail) -> None:
            outcome.executed.append(task.name)
            display.finish(task.name, "[red]✗ failed[/]", self._seconds(task))

        def skip_uptodate(self, task) -> None:
            outcome.cached.append(task.name)
            display.finish(task.name, "[green]✓[/] [dim]up to date[/]")

        def skip_ignore(self, task) -> None:
            pass

        def cleanup_error(self, exception) -> None:
            pass

        def runtime_error(self, msg) -> None:
            outcome.error = outcome.error or RuntimeError(msg)

        def teardown_task(self, task) -> None:
            pass

        def complete_run(self) -> None:
            pass

    return Reporter


STORE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EROFS, errno.EPERM}


def store_error(e: OSError, store: Store) -> StoreError:
    """An OSError of the file system as one line: the path and, for a full disk, the space."""
    where = e.filename or store.root
    text = f"cannot write {where}: {e.strerror or e}"
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        free = shutil.disk_usage(store.root).free
        text += f" ({free / 2**20:.0f} MiB free on the store's file system; free some space)"
    return StoreError(text)


def _action(task: StageTask, store: Store, outcome: Outcome):
    def action():
        try:
            outcome.status[task.name] = store.build(task.artifact, task.produce,
                                                   task.verify, task.reads)
        except OSError as e:
            if e.errno not in STORE_ERRNOS:
                outcome.error = e
                return TaskFailed(f"{type(e).__name__}: {e}")
            outcome.error = store_error(e, store)
            return TaskFailed(str(outcome.error))
        except PimbuildError as e:
            outcome.error = e
            return TaskFailed(str(e))
        except Exception as e:  # a bug: keep the traceback for the caller
            outcome.error = e
            return TaskFailed(f"{type(e).__name__}: {e}")
        return None
    return action


def _doit_tasks(tasks: list[StageTask], store: Store, outcome: Outcome) -> dict:
    creators = {}
    for stage in dict.fromkeys(t.stage for t in tasks):
        subtasks = [{
            "name": t.artifact.key,
            "actions": [_action(t, store, outcome)],
            "task_dep": [f"{a.stage}:{a.key}" for a in t.reads],
            "uptodate": [t.artifact_complete],
            "verbosity": 0,
        } for t in tasks if t.stage == stage]

        def creator(subtasks=subtasks):
            yield from subtasks
        creators[f"task_{stage}"] = creator
    return creators


def doit_database(store: Store) -> Path:
    """doit's database, discarded if it cannot be read (a build killed while sqlite wrote it, a
    file copied half-way): it is a cache of the store, so a fresh one costs nothing. A database
    another build holds locked is waited for (sqlite's busy timeout), never discarded."""
    db = store.root / ".doit.sqlite3"
    try:
        with closing(sqlite3.connect(db, timeout=60)) as conn:
            intact = conn.execute("pragma quick_check").fetchone()[0] == "ok"
    except sqlite3.OperationalError as e:
        if "locked" in str(e):
            return db
        intact = False
    except sqlite3.DatabaseError:
        intact = False
    if not intact:
        for path in (db, db.with_name(db.name + "-journal")):
            path.unlink(missing_ok=True)
    return db


def execute(tasks: list[StageTask], store: Store, console: Console) -> Outcome:
    """Bring every task's artifact up to date; the store decides what is."""
    outcome = Outcome()
    try:
        store.root.mkdir(parents=True, exist_ok=True)
        db = doit_database(store)
        db.touch()  # an unwritable store fails here, as a StoreError naming it
        store.sweep()
    except OSError as e:
        raise store_error(e, store) from None
    display = Display(console)
    with display.progress:
        loader_dict = _doit_tasks(tasks, store, outcome)
        loader_dict["DOIT_CONFIG"] = {
            "dep_file": str(db),
            "backend": "sqlite3",
            "reporter": _reporter(display, outcome),
            "verbosity": 0,
        }
        code = DoitMain(ModuleTaskLoader(loader_dict), config_filenames=()).run(
            [t.name for t in tasks])
    if outcome.error is None and code != 0:
        outcome.error = RuntimeError(f"doit exited with status {code}")
    return outcome
