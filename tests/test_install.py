"""pimbuild as a user meets it (slow: subprocesses): a non-editable install run from another
directory, a model from a package outside the repository, and a rebuild that imports no
heavy dependency."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pimbuild.core import artifacts
from tests.conftest import REPO

SMALL = ["profile.repetitions=3", "profile.backend=timer", "platform.calibration_mib=16",
         "platform.calibration_max_spread=0.5", "show_candidates=false"]
RELU = ["model=relu", "model.size.n=4096"]
HEAVY = ("torch", "torch_mlir.ir", "matplotlib")
# Run the pimbuild command in this interpreter and report, at exit, which heavy modules it
# imported and where pimbuild came from.
PROBE = ("import atexit, sys\n"
         "def report():\n"
         "    import pimbuild\n"
         f"    heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
         "    print('PROBE', pimbuild.__file__, heavy)\n"
         "atexit.register(report)\n"
         "from pimbuild.commands.cli import main\n"
         "sys.argv = ['pimbuild', *sys.argv[1:]]\n"
         "main()\n")


def _pimbuild(args: list[str], cwd: Path, pythonpath: str = "") -> tuple[str, list[str], str]:
    """(where pimbuild was imported from, heavy modules imported, stdout)."""
    env = {**os.environ, "PYTHONPATH": pythonpath, "COLUMNS": "120"}
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("PROBE "))
    _, origin, heavy = line.split(" ", 2)
    return origin, eval(heavy), proc.stdout  # noqa: S307 (our own list literal)


@pytest.mark.slow
def test_rebuilds_import_heavy_dependencies_only_when_a_stage_runs(tmp_path: Path) -> None:
    args = [*RELU, *SMALL, f"store={tmp_path / 'store'}"]
    _, heavy, _ = _pimbuild([*args, f"hydra.run.dir={tmp_path / 'r1'}"], tmp_path)
    assert "torch" in heavy  # lower ran
    _, heavy, _ = _pimbuild([*args, f"hydra.run.dir={tmp_path / 'r2'}"], tmp_path)
    assert heavy == []  # nothing to build: no torch, no MLIR, no matplotlib
    _, heavy, _ = _pimbuild([*args, "pim.cores=64", f"hydra.run.dir={tmp_path / 'r3'}"],
                            tmp_path)
    assert "torch" not in heavy and "torch_mlir.ir" not in heavy  # decide + simulate only
    built = json.loads((tmp_path / "r3" / "build.json").read_text())["executed"]
    assert built == ["decide", "reinsert", "simulate"]


@pytest.mark.slow
def test_non_editable_install_runs_from_another_directory(tmp_path: Path) -> None:
    src, site = tmp_path / "src", tmp_path / "site"
    src.mkdir()
    for part in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / part, src / part)
    for part in ("pimbuild",):  # a copy: pip leaves build/ behind
        shutil.copytree(REPO / part, src / part,
                        ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--target", str(site), str(src)], check=True, timeout=600)
    assert (site / "pimbuild" / "conf" / "model" / "softmax.yaml").is_file()
    assert (site / "pimbuild" / "build" / "graph.py").is_file()
    assert (site / "pimbuild" / "codegen" / "runtime" / "markers.c").is_file()
    for data in ("kernel_model.json", "measured_ops.csv.gz", "devices.csv",  # the GPU fit's
                 "engine_kernels.parquet"):
        assert (site / "pimbuild" / "targets" / "gpus" / "kerneltime" / "data" / data).is_file()
    assert not (site / "tasks").exists() and not (site / "recipes").exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    origin, _, out = _pimbuild(["model=softmax", *SMALL, "stages=[extract]"], elsewhere,
                               pythonpath=str(site))
    assert origin.startswith(str(site))
    assert (elsewhere / "outputs" / "artifacts" / "extract").is_dir()
    # The same code installed or in place has the same version, so artifacts built by one
    # are reused by the other (the GPU machine reuses a store lowered elsewhere).
    version = subprocess.run(
        [sys.executable, "-c", "from pimbuild.core.artifacts import code_version as v; print(v())"],
        cwd=elsewhere, env={**os.environ, "PYTHONPATH": str(site)}, capture_output=True,
        text=True, check=True, timeout=120).stdout.strip()
    assert version == artifacts.code_version()
    _, _, out = _pimbuild(["model=softmax", *SMALL, "stages=[extract]"], elsewhere)
    assert re.search(r"lower:\w+ +✓ up to date", out), out


MODEL_YAML = """\
defaults:
  - model_schema
  - _self_

name: twolayer
recipe: mymodels.net:build
size: {width: 64}
dtype: float32
seed: 0
"""
NET = """\
import torch
from mymodels.blocks import Block
from pimbuild.recipes import Recipe


def build(width: int) -> Recipe:
    return Recipe(Block(width), {"x": torch.randn(1, width)})
"""
BLOCKS = """\
import torch


class Block(torch.nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.up = torch.nn.Linear(width, 2 * width, bias=False)

    def forward(self, x):
        return torch.relu(self.up(x))
"""


@pytest.mark.slow
def test_model_from_a_package_outside_the_repository(tmp_path: Path) -> None:
    pkg = tmp_path / "user" / "mymodels"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "net.py").write_text(NET)
    (pkg / "blocks.py").write_text(BLOCKS)
    conf = tmp_path / "user" / "conf" / "model"
    conf.mkdir(parents=True)
    (conf / "twolayer.yaml").write_text(MODEL_YAML)
    args = ["--config-dir", str(conf.parent), "model=twolayer", *SMALL,
            f"store={tmp_path / 'store'}"]

    def build(run: str) -> dict:
        _pimbuild([*args, f"hydra.run.dir={tmp_path / run}"], tmp_path,
                  pythonpath=str(pkg.parent))
        return json.loads((tmp_path / run / "build.json").read_text())

    assert build("r1")["executed"][:2] == ["lower", "extract"]
    assert build("r2")["executed"] == []
    # An edit to a helper module of the model's package (not the builder's file) rebuilds.
    (pkg / "blocks.py").write_text(BLOCKS.replace("torch.relu", "torch.tanh"))
    assert build("r3")["executed"][:2] == ["lower", "extract"]
    manifest = json.loads((tmp_path / "r3" / "manifest.json").read_text())
    linalg = Path(manifest["stages"]["lower"]["dir"]) / "linalg.mlir"
    assert "math.tanh" in linalg.read_text()
