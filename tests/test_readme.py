"""Every ``pimbuild`` command the README shows composes and plans (no stage runs): the
documented commands and their options stay what the code accepts."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from pimbuild.build.config import validate
from pimbuild.build.graph import plan
from pimbuild.core.artifacts import Store
from tests.conftest import make_cfg

README = Path(__file__).parent.parent / "README.md"


def _commands() -> list[str]:
    """The ``pimbuild ...`` lines of the README's shell blocks, comments cut off (a line
    ending in a backslash joined with the next)."""
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(), re.S)
    text = "\n".join(blocks).replace("\\\n", " ")
    lines = [re.split(r"\s#\s", line)[0].strip() for line in text.splitlines()]
    lines = [re.sub(r"^(\.venv/bin/|bash \.ci/setup && \.venv/bin/)", "", ln) for ln in lines]
    return [ln for ln in lines if ln.startswith("pimbuild ")]


def _overrides(command: str) -> list[str] | None:
    """The config overrides of one command (a sweep's first value of each list), or None
    for a command that needs files of the user's (``--config-dir``) or composes nothing."""
    words = shlex.split(command)[1:]
    if {"--config-dir", "--help", "--version", "--cfg"} & set(words):
        return None
    out = []
    for word in words:
        if word == "-m" or word.lstrip("+").startswith("hydra") or word.startswith("store="):
            continue
        key, _, value = word.partition("=")
        if value.startswith("interval("):  # a searching sweeper's range: its low end
            value = value.removeprefix("interval(").split(",")[0]
        elif value.startswith("choice("):  # its choices: the first
            inner = value.removeprefix("choice(").removesuffix(")")
            value = inner.split("],")[0] + "]" if inner.startswith("[") else inner.split(",")[0]
        elif "-m" in words and "," in value and not value.startswith("["):
            value = value.split(",")[0]
        elif "-m" in words and value.startswith("[") and "],[" in value:
            value = value.split("],[")[0] + "]"
        out.append(f"{key}={value}")
    return out


COMMANDS = _commands()


def test_the_readme_shows_commands_for_both_targets() -> None:
    assert len(COMMANDS) >= 10
    assert any("system=gpus" in c for c in COMMANDS)
    assert any("model=llama7b pim.cores=128" in c for c in COMMANDS)  # the main job


@pytest.mark.parametrize("command", COMMANDS)
def test_a_readme_command_composes_and_plans(command: str, tmp_path: Path) -> None:
    overrides = _overrides(command)
    if overrides is None:
        pytest.skip("needs the user's own files")
    cfg = make_cfg(tmp_path / "store", overrides)
    validate(cfg)
    if cfg.get("experiment") is None:
        assert plan(cfg, Store(tmp_path / "store"), tmp_path / "failure")
