"""A target is a package plus its YAML: a toy target from a test directory
(``tests/toy_target/``, outside pimbuild) builds end to end, with pimbuild's shared stages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pimbuild.build.driver import build
from pimbuild.build.graph import plan
from pimbuild.core.artifacts import Store
from pimbuild.core.errors import ConfigError
from pimbuild.core.stage import spec_errors
from tests.conftest import make_cfg

TOY = Path(__file__).parent / "toy_target"
# Everything the toy target is: its package and the YAML that names it.
TOY_FILES = ["conf/system/toy.yaml", "toytarget/__init__.py", "toytarget/simulate.py"]


def _toy_cfg(tmp_path: Path, monkeypatch, *overrides: str):
    monkeypatch.syspath_prepend(str(TOY))
    return make_cfg(tmp_path / "store", [f"hydra.searchpath=[file://{TOY / 'conf'}]",
                                         "system=toy", "model=relu", "model.size.n=4096",
                                         *overrides])


def test_the_toy_target_is_a_package_and_a_yaml() -> None:
    files = sorted(str(p.relative_to(TOY)) for p in TOY.rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts)
    assert files == TOY_FILES


def test_a_toy_target_builds_end_to_end(tmp_path: Path, monkeypatch) -> None:
    result = build(_toy_cfg(tmp_path, monkeypatch), tmp_path / "run")
    stages = result.manifest["stages"]
    assert list(stages) == ["lower", "extract", "simulate"]
    report = json.loads((Path(stages["simulate"]["dir"]) / "report.json").read_text())
    assert report["nests"] == 1 and report["iterations"] == 4096  # relu of 4096 elements
    assert report["seconds"] == pytest.approx(4096 / 1e9)
    import toytarget.simulate

    assert spec_errors(toytarget.simulate) == []


def test_the_toy_target_parameters_enter_its_stage_key(tmp_path: Path, monkeypatch) -> None:
    def key(*overrides: str) -> str:
        tasks = plan(_toy_cfg(tmp_path, monkeypatch, *overrides), Store(tmp_path / "s"),
                     tmp_path / "f")
        return {t.stage: t.artifact.key for t in tasks}

    base, faster = key(), key("system.params.iterations_per_s=2e9")
    assert base["lower"] == faster["lower"] and base["simulate"] != faster["simulate"]


def test_a_stage_the_toy_target_lacks_is_refused(tmp_path: Path, monkeypatch) -> None:
    with pytest.raises(ConfigError, match="stages of system=toytarget:TARGET are: lower, "
                                          "extract, simulate"):
        plan(_toy_cfg(tmp_path, monkeypatch, "stages=[profile]"), Store(tmp_path / "s"),
             tmp_path / "f")
