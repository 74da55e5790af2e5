"""What the benchmarks share (not a test): one build from overrides, with the console quiet;
writing a result file."""

from __future__ import annotations

import json
import time
from pathlib import Path

from hydra import compose, initialize_config_module

from pimbuild.build.driver import BuildResult, build
from pimbuild.commands.cli import CONFIG_MODULE
from pimbuild.core.console import console


def quiet_build(overrides: list[str], run_dir: Path) -> tuple[BuildResult, float]:
    """Compose the config with ``overrides`` (no candidates table) and build it silently;
    returns the result and the build's wall seconds (composition not included)."""
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose("config", overrides=[*overrides, "show_candidates=false"])
    console.quiet = True
    try:
        start = time.perf_counter()
        result = build(cfg, run_dir)
        return result, time.perf_counter() - start
    finally:
        console.quiet = False


def write_json(path: Path, data) -> None:
    """Write a benchmark's results to ``path`` (its folder made if need be) and say where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")
    console.print(f"wrote {path}")
