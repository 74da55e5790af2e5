"""Shared fixtures: composed configs (Hydra's compose API) and in-process builds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import DictConfig

from pimbuild.build.driver import BuildResult, build
from pimbuild.commands.cli import CONFIG_MODULE

REPO = Path(__file__).resolve().parent.parent


# Small, fast defaults for every test build; a test's own overrides come later and win.
TEST_DEFAULTS = ["show_candidates=false", "platform.calibration_mib=16",
                 "lowering.register_block=16",
                 "platform.calibration_max_spread=0.5",
                 "profile.repetitions=3", "profile.warmup=1"]


def make_cfg(store: Path, overrides: list[str]) -> DictConfig:
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        return compose(config_name="config",
                       overrides=[f"store={store}", *TEST_DEFAULTS, *overrides])


@pytest.fixture(scope="session")
def runtime_dir(tmp_path_factory) -> Path:
    """The marker runtime, built once for tests that call stages directly."""
    from pimbuild.codegen import runtime

    out = tmp_path_factory.mktemp("runtime")
    runtime.build(out)
    return out


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "artifacts"


@pytest.fixture
def run_build(tmp_path: Path, store: Path):
    """``run_build(overrides) -> BuildResult``, each call in a fresh run directory."""
    counter = iter(range(1000))

    def _run(overrides: list[str]) -> BuildResult:
        return build(make_cfg(store, overrides), tmp_path / f"run{next(counter)}")
    return _run


def artifact_dir(result: BuildResult, stage: str) -> Path:
    return Path(result.manifest["stages"][stage]["dir"])


def candidates(result: BuildResult) -> list[dict]:
    return json.loads((artifact_dir(result, "extract") / "candidates.json").read_text())[
        "candidates"]


def store_entries(store: Path) -> list[Path]:
    """Every entry under ``<store>/<stage>/`` (artifacts and anything left half-written)."""
    if not store.exists():
        return []
    stages = [d for d in store.iterdir() if d.is_dir() and not d.name.startswith(".")]
    stages += [d for d in (store / ".runcache").glob("*") if d.is_dir()]
    return sorted(p for stage in stages for p in stage.iterdir())


# What every command-line build in the tests adds unless it says otherwise: B_cpu's
# calibration accepts a spread the loaded test machine can give (a build that refuses an
# unstable B_cpu is tested on its own, in tests/targets/pim/test_profile.py).
CLI_DEFAULTS = ["platform.calibration_max_spread=0.5"]


def run_cli(args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run the installed ``pimbuild`` command; tests' recipes are importable from the repo."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "120"}
    exe = Path(sys.executable).parent / "pimbuild"
    extra = [] if "--help" in args or any("calibration_max_spread" in a for a in args) \
        else CLI_DEFAULTS
    return subprocess.run([str(exe), *args, *extra], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


def pytest_configure(config) -> None:
    """Hypothesis' examples per property (tests/test_inputs.py): a few in the quick test
    (``-m "not slow"``), more in the full suite, both from a fixed seed so that a run answers
    the same each time; ``PIMBUILD_FUZZ=explore`` draws many more, from a new seed each run
    (a failure prints the example to add as a case)."""
    from hypothesis import settings

    settings.register_profile("quick", max_examples=12, derandomize=True)
    settings.register_profile("full", max_examples=120, derandomize=True)
    settings.register_profile("explore", max_examples=2000)
    quick = "not slow" in (config.option.markexpr or "")
    settings.load_profile(os.environ.get("PIMBUILD_FUZZ") or ("quick" if quick else "full"))
