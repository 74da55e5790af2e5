"""Run stage tasks with doit's API; report each task to a rich progress display."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from doit.cmd_base import ModuleTaskLoader
from doit.doit_cmd import DoitMain
from doit.exceptions import TaskFailed
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from pimbuild.artifacts import Store
from pimbuild.errors import PimbuildError
from pimbuild.tasks.graph import StageTask


@dataclass
class Outcome:
    executed: list[str] = field(default_factory=list)  # task names doit ran
    cached: list[str] = field(default_factory=list)  # task names doit found up to date
    seconds: dict[str, float] = field(default_factory=dict)
    error: BaseException | None = None


def _reporter(progress: Progress, outcome: Outcome):
    """A doit reporter class bound to ``progress`` and ``outcome``."""

    class Reporter:
        def __init__(self, outstream, options) -> None:
            self.rows: dict[str, int] = {}
            self.start: dict[str, float] = {}

        def initialize(self, tasks, selected_tasks) -> None:
            pass

        def get_status(self, task) -> None:
            pass

        def execute_task(self, task) -> None:
            self.start[task.name] = time.perf_counter()
            self.rows[task.name] = progress.add_task(f"{task.name}  building", total=None)

        def _finish(self, task, text: str) -> None:
            outcome.seconds[task.name] = time.perf_counter() - self.start[task.name]
            progress.update(self.rows[task.name], total=1, completed=1,
                            description=f"{task.name}  {text}")

        def add_success(self, task) -> None:
            outcome.executed.append(task.name)
            self._finish(task, "[green]built[/]")

        def add_failure(self, task, fail) -> None:
            outcome.executed.append(task.name)
            self._finish(task, "[red]failed[/]")

        def skip_uptodate(self, task) -> None:
            outcome.cached.append(task.name)
            row = progress.add_task(f"{task.name}  [dim]up to date[/]", total=1)
            progress.update(row, completed=1)

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


def _action(task: StageTask, store: Store, outcome: Outcome):
    def action():
        try:
            store.build(task.artifact, task.produce)
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
            "file_dep": [str(p) for p in t.file_dep],
            "targets": [str(p) for p in t.targets],
            "uptodate": [t.artifact_complete],
            "verbosity": 0,
        } for t in tasks if t.stage == stage]

        def creator(subtasks=subtasks):
            yield from subtasks
        creators[f"task_{stage}"] = creator
    return creators


def execute(tasks: list[StageTask], store: Store, console: Console) -> Outcome:
    """Bring every task's artifact up to date; doit decides what runs."""
    outcome = Outcome()
    store.root.mkdir(parents=True, exist_ok=True)
    columns = (SpinnerColumn(finished_text="[green]✓[/]"), TextColumn("{task.description}"),
               TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        loader_dict = _doit_tasks(tasks, store, outcome)
        loader_dict["DOIT_CONFIG"] = {
            "dep_file": str(Path(store.root) / ".doit.sqlite3"),
            "backend": "sqlite3",
            "reporter": _reporter(progress, outcome),
            "verbosity": 0,
        }
        code = DoitMain(ModuleTaskLoader(loader_dict), config_filenames=()).run(
            [t.name for t in tasks])
    if outcome.error is None and code != 0:
        outcome.error = RuntimeError(f"doit exited with status {code}")
    return outcome
