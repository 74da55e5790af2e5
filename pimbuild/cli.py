"""The ``pimbuild`` command: a Hydra app around ``pimbuild.build.build``."""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig
from rich.markup import escape

from pimbuild.config import register_configs
from pimbuild.console import error
from pimbuild.errors import PimbuildError
from pimbuild.sweep import FAILED

CONFIG_MODULE = "pimbuild.conf"  # the config tree ships with the package (conf/ in the repo)
register_configs()


@hydra.main(version_base="1.3", config_path=f"pkg://{CONFIG_MODULE}", config_name="config")
def app(cfg: DictConfig) -> None:
    with quit_on_interrupt():
        from pimbuild.build import build  # heavy imports (torch) after Hydra parsed overrides

    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        if cfg.get("experiment") is not None:
            from pimbuild import experiments

            experiments.run(cfg, list(HydraConfig.get().overrides.task), out_dir)
        else:
            build(cfg, out_dir)
    except PimbuildError as e:
        error(escape(str(e)))
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            # The sweep goes on; its summary lists this job, and the command exits 1.
            (out_dir / FAILED).write_text(str(e) + "\n")
            return
        sys.exit(1)
    except KeyboardInterrupt:
        error("interrupted: artifacts published so far are kept, nothing half-written is")
        sys.exit(130)


INTERRUPTED_EARLY = "interrupted before the build started: nothing was written to the store"


@contextmanager
def quit_on_interrupt() -> Iterator[None]:
    """Ctrl-C inside the block (importing torch and torch-mlir) ends the process at once
    with one line and exit status 130, instead of raising KeyboardInterrupt there, inside
    an extension module's initialisation (a traceback at best; a CI run's interrupt test
    once ended in SIGSEGV with no output, which fits this). Nothing is in the store yet."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def leave(signum: int, frame: object) -> None:
        os.write(2, f"error: {INTERRUPTED_EARLY}\n".encode())
        os._exit(130)

    previous = signal.signal(signal.SIGINT, leave)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def hydra_error_line(e: HydraException) -> str:
    """One line for a composition error (unknown option, bad override) Hydra would print as a page.

    ``Available options`` lists lose the schema entries Hydra keeps in the same group."""
    head, _, rest = str(e).partition("\n")
    found = re.search(r"Available options in '([^']+)':\n((?:\t.*\n?)*)", rest)
    if found:
        names = [n.strip() for n in found.group(2).splitlines()]
        names = [n for n in names if n and not n.endswith("_schema")]
        return f"{head.rstrip('.')} (choices: {', '.join(names)})"
    detail = next((line.strip() for line in rest.splitlines() if line.strip()), "")
    if not detail and e.__cause__ is not None:  # e.g. a value of the wrong type
        detail = str(e.__cause__).partition("\n")[0]
    head = head.rstrip(".")
    return f"{head}: {detail}" if detail else head


def main() -> None:
    # Let composition errors reach us instead of Hydra's printer, unless the user asked for the
    # full trace (HYDRA_FULL_ERROR=1), in which case Hydra's behaviour is kept.
    full_trace = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        app()
    except HydraException as e:
        if full_trace:
            raise
        error(escape(hydra_error_line(e)))
        sys.exit(1)
    except KeyboardInterrupt:  # while Hydra composed the config (the build handles its own)
        error(INTERRUPTED_EARLY)
        sys.exit(130)


if __name__ == "__main__":
    main()
