"""Every stage module has the same shape, and its key covers all the config it reads."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from pathlib import Path

import pytest

from pimbuild.build.graph import STAGES, key, pipeline, stage_module
from pimbuild.core.stage import spec_errors
from tests.conftest import make_cfg

# Every (system, stage) of every target's pipeline.
PIPELINES = [(system, stage) for system in ("pim", "gpus") for stage in pipeline(system)]

# Names through which code can reach the composed config.
CONFIG_NAMES = {"cfg", "DictConfig", "OmegaConf", "HydraConfig", "compose", "GlobalHydra"}


@pytest.mark.parametrize(("system", "stage"), PIPELINES)
def test_stage_module_has_the_protocol(system: str, stage: str) -> None:
    module = stage_module(stage, system)
    assert spec_errors(module) == []
    assert module.NAME == stage
    assert all(r in pipeline(system) and STAGES.index(r) < STAGES.index(stage)
               for r in module.READS)
    assert list(inspect.signature(module.run).parameters) == ["inputs", "p", "out"]


def _functions_outside_params(tree: ast.Module) -> list[ast.FunctionDef]:
    """Every function of the module that does not receive the config as ``cfg``."""
    return [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
            and "cfg" not in [a.arg for a in node.args.args]]


@pytest.mark.parametrize(("system", "stage"), PIPELINES)
def test_stage_reads_config_only_through_params(system: str, stage: str) -> None:
    """Only the functions that receive ``cfg`` (``params`` and its helpers) see the config;
    ``run`` and everything else in the module work from the frozen Params alone."""
    tree = ast.parse(Path(stage_module(stage, system).__file__).read_text())
    for func in _functions_outside_params(tree):
        names = {n.id for n in ast.walk(func) if isinstance(n, ast.Name)}
        names |= {n.attr for n in ast.walk(func) if isinstance(n, ast.Attribute)}
        assert not names & CONFIG_NAMES, f"{stage}.{func.name} reads {names & CONFIG_NAMES}"
    module_level = [n for n in tree.body if not isinstance(n, (ast.FunctionDef,
                                                               ast.ClassDef))]
    for node in module_level:
        used = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
        assert not used & {"HydraConfig", "compose", "GlobalHydra"}, stage


SHARED = sorted({m for system in ("pim", "gpus") for m in pipeline(system).values()
                 if not m.startswith("pimbuild.targets.")})
# What runs every target: the shared stages, the task graph, the build, the store, the CLI.
INFRASTRUCTURE = [*SHARED, "pimbuild.build.graph", "pimbuild.build.driver",
                  "pimbuild.core.artifacts",
                  "pimbuild.commands.cli", "pimbuild.core.console", "pimbuild.commands.sweep"]


def _tree(module: str) -> ast.Module:
    return ast.parse(Path(importlib.import_module(module).__file__).read_text())


def test_both_targets_share_lower_and_extract() -> None:
    assert {"pimbuild.frontend.lower", "pimbuild.codegen.extract"} <= set(SHARED)


@pytest.mark.parametrize("module", INFRASTRUCTURE)
def test_shared_code_knows_no_target_by_name(module: str) -> None:
    """The shared stages and the build know a target only through the registry and the
    ``Target`` interface: they import no target's package and name no side or device."""
    tree = _tree(module)
    imports = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imports |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imports if m and m.startswith("pimbuild.targets.")}
    literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
                and isinstance(n.value, str)}
    assert not literals & {"pim", "host", "PIM", "gpus"}


@pytest.mark.parametrize(("system", "stage"), PIPELINES)
def test_a_target_stage_imports_no_other_target(system: str, stage: str) -> None:
    imports = {n.module for n in ast.walk(_tree(pipeline(system)[stage]))
               if isinstance(n, ast.ImportFrom)}
    home = {"pim": "offload"}.get(system, system)  # the package its stages come from
    others = {f"pimbuild.targets.{t}" for t in ("pim", "gpus", "offload") if t != home}
    assert not {m for m in imports if m and any(m.startswith(o) for o in others)}


def test_key_is_exactly_the_params(tmp_path: Path) -> None:
    """Changing a value changes the key of exactly the stages whose Params hold it."""
    base = make_cfg(tmp_path, ["model=relu"])
    cores = make_cfg(tmp_path, ["model=relu", "pim.cores=32"])
    reps = make_cfg(tmp_path, ["model=relu", "profile.repetitions=4"])
    for stage in STAGES:
        module = stage_module(stage, "pim")
        a, b, c = (module.params(cfg) for cfg in (base, cores, reps))
        assert (key(stage, a, {}) != key(stage, b, {})) == (a != b)
        assert (key(stage, a, {}) != key(stage, c, {})) == (a != c)
        assert dataclasses.asdict(a) == dataclasses.asdict(module.params(base))
    changed = {s for s in STAGES if stage_module(s, "pim").params(base)
               != stage_module(s, "pim").params(cores)}
    assert changed == {"decide", "simulate"}  # reinsert follows through decide's key


def test_gpu_keys_follow_their_params(tmp_path: Path) -> None:
    """On the GPU pipeline, a link change re-keys profile onward (its Params hold the target)
    but not lower or extract; a planner change re-keys decide and simulate only."""
    over = ["system=gpus", "model=relu"]
    base = make_cfg(tmp_path, over)
    link = make_cfg(tmp_path, [*over, "link=rdma25"])
    latency = make_cfg(tmp_path, [*over, "gpus.planner=latency"])

    def changed(other) -> set[str]:
        return {s for s in pipeline("gpus") if stage_module(s, "gpus").params(base)
                != stage_module(s, "gpus").params(other)}
    assert changed(link) == {"profile", "decide", "simulate"}
    assert changed(latency) == {"decide", "simulate"}
    assert changed(make_cfg(tmp_path, [*over, "policy=oracle"])) == set()  # the PIM target's
