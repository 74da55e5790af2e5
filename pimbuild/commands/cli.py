"""The ``pimbuild`` command: a Hydra app around ``pimbuild.build.driver.build``."""

from __future__ import annotations

import _thread
import faulthandler
import json
import logging
import os
import re
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import NoReturn

import hydra
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from rich.markup import escape

from pimbuild.build.config import register_configs, unknown_key
from pimbuild.build.driver import build
from pimbuild.commands import usage
from pimbuild.commands.sweep import FAILED
from pimbuild.core.console import error
from pimbuild.core.errors import PimbuildError
from pimbuild.paper import experiments

CONFIG_MODULE = "pimbuild.conf"  # the config tree, a package (pimbuild/conf/ in the repo)
register_configs()


def unique_dir(path: str) -> str:
    """``path``, or ``path_2``, ``path_3``, ...: the first that this process creates (an
    atomic ``mkdir``), so two builds started in the same second keep a folder each."""
    base = Path(path)
    base.parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        here = base if n == 1 else base.with_name(f"{base.name}_{n}")
        try:
            here.mkdir()
            return str(here)
        except FileExistsError:
            continue
    raise PimbuildError(f"{path}: 10,000 runs started in one second")


# Cached: Hydra resolves the run's folder more than once, and each must be the same.
OmegaConf.register_new_resolver("pimbuild_unique", unique_dir, use_cache=True)


@hydra.main(version_base="1.3", config_path=f"pkg://{CONFIG_MODULE}", config_name="config")
def app(cfg: DictConfig) -> float | None:
    """One build; returns its ``objective`` (what a searching sweeper, Optuna's, compares)."""
    out_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        if cfg.get("experiment") is not None:
            experiments.run(cfg, list(HydraConfig.get().overrides.task), out_dir)
            return None
        return objective(build(cfg, out_dir).manifest, cfg.objective)
    except PimbuildError as e:
        error(escape(str(e)))
        if HydraConfig.get().mode == RunMode.MULTIRUN:
            # The sweep goes on; its summary lists this job, and the command exits 1 (a
            # searching sweeper records the trial as failed: its value is NaN).
            (out_dir / FAILED).write_text(str(e) + "\n")
            return float("nan")
        sys.exit(1)
    except KeyboardInterrupt:  # raised outside any import (see defer_interrupts_in_imports)
        error("interrupted: the artifacts published so far are kept; what was half-written "
              "is removed")
        leave(130)


def objective(manifest: dict, name: str) -> float | None:
    """The number a build stands for: its report's ``headline`` (the speedup over CPU-only
    on the PIM target, the planned throughput on the GPU target) or, by name, one of its
    ``sweep_columns`` (``Perf/$``); None without a simulate stage."""
    if "simulate" not in manifest["stages"]:
        return None
    report = json.loads((Path(manifest["stages"]["simulate"]["dir"]) / "report.json")
                        .read_text())
    if name == "headline":
        return float(report["headline"]["value"])
    if name not in report["sweep_columns"]:
        raise PimbuildError(f"objective={name}: the report has no such column (it has "
                            f"headline, {', '.join(report['sweep_columns'])})")
    return float(report["sweep_columns"][name])


INTERRUPTED_EARLY = "interrupted before the build started: nothing was written to the store"
RETRY_S = 0.05  # how often an interrupt that came during an import is tried again


def importing(frame: FrameType | None) -> bool:
    """Whether ``frame`` runs inside an import: a module's top level, or an extension
    module's initialisation, below importlib's frames."""
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


INTERRUPTED_TWICE = ("interrupted twice while a module was imported: left at once; the "
                     "store's unfinished folders are removed by the next build")
_deferred = {"pending": False, "retry": False}  # an interrupt waits; the next is a retry


def on_interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGINT: KeyboardInterrupt, except inside an import, where it waits until the import
    is over (tried again every ``RETRY_S``). Torch and torch-mlir are imported lazily,
    inside the first stage; a KeyboardInterrupt raised inside one of their modules'
    initialisation leaves the process with half-registered C++ state (an abort was seen
    here, and a CI run's interrupt test ended in SIGSEGV with no output). A second Ctrl-C
    while one waits leaves at once (an import that hangs)."""
    retry, _deferred["retry"] = _deferred["retry"], False
    if _deferred["pending"] and not retry:
        os.write(2, f"error: {INTERRUPTED_TWICE}\n".encode())
        os._exit(130)
    if importing(frame):
        _deferred["pending"] = True
        timer = threading.Timer(RETRY_S, _retry, (signum,))
        timer.daemon = True
        timer.start()
        return
    _deferred["pending"] = False
    raise KeyboardInterrupt


def _retry(signum: int) -> None:
    _deferred["retry"] = True
    _thread.interrupt_main(signum)


def defer_interrupts_in_imports() -> None:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, on_interrupt)


def leave(status: int) -> NoReturn:
    """Exit after an interrupt, once the stores' temporary folders are gone (their
    ``finally`` blocks ran while KeyboardInterrupt unwound), without the interpreter's
    finalisation, which would tear down torch and MLIR objects an interrupt may have
    left half-built."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    logging.shutdown()
    os._exit(status)


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
    listed = re.match(r"Error merging override ([\w.]+)=(.*)", head)
    if listed and "is not a ListConfig, list or tuple" in detail:  # a list given one value
        key, value = listed.groups()
        return f"{key} is a list: write {key}=[{value}]"
    relocated = re.match(r"Error merging override (\w+)=(\w+)", head)
    if relocated and relocated.group(1) in RELOCATED:  # a group chosen under another name
        key, name = relocated.groups()
        detail = f"{key} is chosen from the {RELOCATED[key]} group: {RELOCATED[key]}@{key}={name}"
    line = f"{head}: {detail}" if detail else head
    return line.replace("while composing config::", "while composing config:")  # Hydra's "::"


def composition_error_line(e: Exception) -> str:
    """One line for what stopped Hydra composing the config: its own errors
    (``hydra_error_line``), a config file that is not YAML, a value no file sets that the
    run's folder needs (a model file without ``name``)."""
    if isinstance(e, HydraException):
        return hydra_error_line(e)
    if isinstance(e, yaml.YAMLError):
        mark = getattr(e, "problem_mark", None)
        where = f"{mark.name}, line {mark.line + 1}" if mark else "a config file"
        return f"cannot read {where}: {getattr(e, 'problem', None) or e} (not valid YAML)"
    missing = re.search(r"Missing mandatory value: ([\w.]+)", str(e))
    if missing:
        key = missing.group(1)
        return (f"{key} has no value: set it in its config file or on the command line "
                f"({key}=...)")
    return str(e).partition("\n")[0]


RELOCATED = {"tp_link": "link"}  # pimbuild/conf/config.yaml's `- link@tp_link: nvlink3`


# Overrides renamed: old key -> (new key, what it is); the old one gets one line saying the new.
RENAMED = {"targets": ("stages", "the stages to build")}
# The GPU target's planners were once options of the ``policy`` group.
PLANNERS_WERE_POLICIES = {"throughput", "latency"}


def renamed_override(args: list[str]) -> str | None:
    """The error line for an override that uses a key's old name (``targets=[lower]``,
    ``policy=latency``), or None. Checked before Hydra composes, which would only say that the
    key or option is unknown."""
    for arg in args:
        key, eq, value = arg.lstrip("+~").partition("=")
        if not eq:
            continue
        if key in RENAMED:
            new, what = RENAMED[key]
            return f"`{key}=` is now `{new}=` ({what}): {new}={value}"
        if key in ("policy", "policy.name") and set(value.split(",")) <= PLANNERS_WERE_POLICIES:
            return (f"`{key}={value}` is now `gpus.planner={value}` (the GPU target's "
                    f"planner; `policy` is the PIM target's): gpus.planner={value}")
    return None


def experiment_overridden(args: list[str]) -> str | None:
    """The error line for ``experiment=<name>`` without its ``+`` (which Hydra answers with a
    ValueError for a number, or a page), or None."""
    for arg in args:
        key, eq, value = arg.partition("=")
        if key == "experiment" and eq:
            return (f"an experiment is added, not overridden: +experiment={value} (choices: "
                    f"{', '.join(usage.choices('experiment'))})")
    return None


def schema_chosen(args: list[str]) -> str | None:
    """The error line for a group's schema picked as an option (``model=model_schema``: the
    types its options start from, with no values), or None."""
    for arg in args:
        key, eq, value = arg.lstrip("+~").partition("=")
        group = key.partition("@")[0]
        for name in value.split(",") if eq and group in usage.GROUPS else ():
            if name.endswith("_schema"):
                return (f"{key}={name}: {name} is the {group} group's schema (types, no values), "
                        f"not an option; choose one of "
                        f"{', '.join(usage.choices(group, usage.config_dir(args)))}")
    return None


def unknown_override(args: list[str]) -> str | None:
    """The error line for an override (appended with ``+`` or not) of a key no schema has,
    with the nearest key it has (``modle=relu``: did you mean ``model=``?), or None. Hydra
    would advise appending such a key, and an appended key nothing reads changes nothing."""
    for arg in args:
        key, eq, _ = arg.partition("=")
        key = key.lstrip("+~")
        if eq and key and not arg.startswith("-") and "@" not in key and "/" not in key \
                and key.partition(".")[0] != "hydra":
            line = unknown_key(key)
            if line is not None:
                return line
    return None


def shadowed_option(args: list[str]) -> str | None:
    """The error line for a file of the ``--config-dir`` named like an option pimbuild ships
    (``device/l40s.yaml``), which Hydra would silently pass over for the shipped one, or
    None."""
    mine = usage.config_dir(args)
    for group in usage.GROUPS if mine is not None else ():
        for path in sorted((mine / group).glob("*.yaml")):
            if path.stem in usage.choices(group):
                return (f"{path} has the name of the {group} option pimbuild ships, which "
                        f"would be used instead: give yours another name (e.g. "
                        f"{path.stem}_mine.yaml)")
    return None


def with_user_devices(args: list[str]) -> list[str]:
    """``args`` with the device files of the ``--config-dir`` that ``devices=`` names added to
    the catalogue (``+device@device.<name>=<name>``, unless the command line adds it itself).
    Only those: a device file of the user's that a build does not use cannot stop it."""
    keys = {a.lstrip("+").partition("=")[0] for a in args}
    named = {n for a in args if a.startswith("devices=")
             for n in re.findall(r"[^\[\],\s]+", a.partition("=")[2])}
    added = [f"+device@device.{n}={n}" for n in usage.user_devices(usage.config_dir(args))
             if n in named and f"device@device.{n}" not in keys]
    # beside the overrides, which Hydra reads as one run of words (not after an option)
    at = next(i for i, a in enumerate(args) if a.startswith("devices=")) + 1 if added else 0
    return [*args[:at], *added, *args[at:]]


def first_contact(args: list[str]) -> None:
    """Answer ``--help`` and ``--version`` (then exit), and refuse in one line an override
    that names an old key, an experiment without its ``+`` or a schema; before Hydra sees the
    command line."""
    if {"--help", "-h"} & set(args):
        print(usage.help_text(usage.config_dir(args)), end="")
        sys.exit(0)
    if "--version" in args:
        print(usage.versions(), end="")
        sys.exit(0)
    refused = renamed_override(args) or experiment_overridden(args) or schema_chosen(args) \
        or unknown_override(args) or shadowed_option(args)
    if refused is not None:
        error(escape(refused))
        sys.exit(1)


def report_crashes() -> None:
    """A crash in native code (a pass of torch-mlir or LLVM, a compiled program) prints the
    signal and the Python stack it hit, which names the stage, instead of ending the process
    with no output. The passes known to crash run in a child first (``mlir.run_pipeline``)."""
    faulthandler.enable(file=sys.stderr)


def main() -> None:
    report_crashes()
    # Let composition errors reach us instead of Hydra's printer, unless the user asked for the
    # full trace (HYDRA_FULL_ERROR=1), in which case Hydra's behaviour is kept.
    full_trace = os.environ.get("HYDRA_FULL_ERROR") == "1"
    os.environ["HYDRA_FULL_ERROR"] = "1"
    defer_interrupts_in_imports()
    first_contact(sys.argv[1:])
    sys.argv[1:] = with_user_devices(sys.argv[1:])
    try:
        app()
    except (HydraException, OmegaConfBaseException, yaml.YAMLError) as e:
        if full_trace:
            raise
        error(escape(composition_error_line(e)))
        sys.exit(1)
    except KeyboardInterrupt:  # while Hydra composed the config (the build handles its own)
        error(INTERRUPTED_EARLY)
        leave(130)


if __name__ == "__main__":
    main()
