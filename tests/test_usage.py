"""First contact: the help page, ``--version``, every option the help lists composing and
planning (or refused in one line), a schema refused as an option, a user's own GPU from a
``--config-dir``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from pimbuild.build.config import validate
from pimbuild.build.graph import plan
from pimbuild.commands import cli, usage
from pimbuild.core.artifacts import Store
from pimbuild.core.errors import PimbuildError
from pimbuild.paper.experiments import point_overrides
from tests.conftest import CONFIG_MODULE, REPO, TEST_DEFAULTS, make_cfg, run_cli

RTX3090 = """\
# NVIDIA GeForce RTX 3090 (GA102), spec sheet: 35.6 TFLOPS FP32, 71 BF16 dense, 936 GB/s.
name: RTX 3090
fp32_tflops: 35.6
bf16_tflops: 71.0
mem_gbps: 936
l2_mb: 6
memory_gb: 24
launch_us: 2.0
price_per_hour: 0.25
sms: 82
boost_mhz: 1695
tdp_w: 350
"""


def listed(text: str) -> dict[str, list[str]]:
    """How each group is chosen (``model=``, ``devices=[a,b]``) -> the options the help page
    lists under it."""
    section = text.split("Config groups")[1].split("\nTop-level keys")[0]
    groups: dict[str, list[str]] = {}
    for line in section.splitlines()[1:]:
        if re.match(r"  \S", line):
            how = line.split()[0]
            groups[how] = []
        elif line.strip():
            groups[how] += [o.strip() for o in line.split(",") if o.strip()]
    return groups


def test_every_group_and_top_level_key_has_a_line() -> None:
    """A group added under pimbuild/conf/ or a key added to the root schema must be introduced."""
    dirs = {p.parent.name for p in usage.CONF.glob("*/*.yaml")}
    assert set(usage.GROUPS) == dirs
    assert list(usage.KEYS) == usage.top_level_keys()


def test_the_help_page_introduces_pimbuild_and_lists_no_schema() -> None:
    text = usage.help_text()
    assert text.startswith(f"pimbuild {usage.__version__}:")
    assert "system=gpus" in text and "pim.cores=128" in text and "_schema" not in text
    groups = listed(text)
    assert groups["model="] == usage.choices("model") and "llama7b" in groups["model="]
    assert groups["system="] == ["gpus", "pim"]
    assert groups["devices=[a,b]"] == usage.choices("device") and "a100" in groups["devices=[a,b]"]
    assert all(groups.values())


def walk_overrides(how: str, option: str) -> list[list[str]]:
    """The builds that try ``option`` of the group chosen by ``how``: on both targets where
    both read it."""
    if how == "model=":
        return [[f"model={option}"], ["system=gpus", f"model={option}"]]
    if how == "devices=[a,b]":
        return [["system=gpus", f"devices=[a100,{option}]"]]
    if how == "link=":
        return [["system=gpus", f"link={option}"], ["system=gpus", f"link@tp_link={option}"]]
    if how in ("gpus=", "serve="):
        return [["system=gpus", f"{how}{option}"]]
    return [[f"{how}{option}"]]


def plan_or_refuse(overrides: list[str], tmp_path: Path) -> str | None:
    """Compose and plan (nothing runs); None, or the one-line refusal. Any other exception
    (a traceback) fails the test."""
    try:
        cfg = make_cfg(tmp_path / "store", overrides)
        if cfg.get("experiment") is None:
            assert plan(cfg, Store(tmp_path / "store"), tmp_path / "failure")
            return None
        validate(cfg)
        for point in cfg.experiment.points.values():
            with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
                sub = compose("config", overrides=[
                    f"store={tmp_path / 'store'}", *TEST_DEFAULTS,
                    *point_overrides(overrides, list(point))])
            assert plan(sub, Store(tmp_path / "store"), tmp_path / "failure")
    except PimbuildError as e:
        assert "\n" not in str(e).strip(), str(e)
        return str(e)
    return None


@pytest.mark.slow
def test_every_option_the_help_lists_plans_or_refuses_in_one_line(tmp_path: Path) -> None:
    walked, refused = 0, []
    for how, options in listed(usage.help_text()).items():
        for option in options:
            for overrides in walk_overrides(how, option):
                walked += 1
                line = plan_or_refuse(overrides, tmp_path)
                if line is not None:
                    refused.append(f"{' '.join(overrides)}: {line}")
    for key in usage.KEYS:
        for target in usage.choices("system"):
            values = {"stages": [f"[{s}]" for s in usage.stages(target)],  # as the help lists
                      "store": ["elsewhere"], "show_candidates": ["true", "false"],
                      "verify": ["true"], "devices": ["[l40s,a100,h100]"],
                      "timeline": ["true"], "objective": ["Perf/$"]}[key]
            for value in values:
                walked += 1
                line = plan_or_refuse([f"system={target}", f"{key}={value}"], tmp_path)
                if line is not None:
                    refused.append(f"system={target} {key}={value}: {line}")
    print(f"{walked} option(s) walked, {len(refused)} refused in one line")
    assert walked > 100 and refused == []


def test_a_schema_is_refused_as_an_option() -> None:
    for arg in ("model=model_schema", "link@tp_link=link_schema", "policy=torchpim,policy_schema"):
        line = cli.schema_chosen(["system=pim", arg])
        assert line is not None and "schema" in line and "choose one of" in line, arg
    assert cli.schema_chosen(["model=relu", "system=gpus", "store=x_schema"]) is None
    assert "relu" in cli.schema_chosen(["model=model_schema"])


def test_a_user_device_joins_the_catalogue_when_named(tmp_path: Path) -> None:
    (tmp_path / "device").mkdir()
    (tmp_path / "device" / "rtx3090.yaml").write_text(RTX3090)
    (tmp_path / "device" / "unused.yaml").write_text("tflops: 1\n")  # wrong, but not named
    assert usage.user_devices(tmp_path) == ["rtx3090", "unused"]
    assert "rtx3090" in usage.help_text(tmp_path)
    args = ["--config-dir", str(tmp_path), "system=gpus", "devices=[a100,rtx3090]"]
    assert cli.with_user_devices(args) == [*args, "+device@device.rtx3090=rtx3090"]
    assert cli.with_user_devices(["system=pim", f"--config-dir={tmp_path}"]) == \
        ["system=pim", f"--config-dir={tmp_path}"]
    mine = [*args, "+device@device.rtx3090=rtx3090"]  # the spelling of old: not added twice
    assert cli.with_user_devices(mine) == mine


@pytest.mark.slow
def test_help_and_version_from_the_command(tmp_path: Path) -> None:
    shown = run_cli(["--help"], tmp_path)
    assert shown.returncode == 0 and shown.stdout == usage.help_text()
    version = run_cli(["--version"], tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("pimbuild ")
    assert re.search(r"torch 2\.\d+", version.stdout) and "torch-mlir" in version.stdout
    refused = run_cli(["model=model_schema"], tmp_path)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_a_gpu_of_the_users_own_is_used_in_a_build(tmp_path: Path) -> None:
    conf = tmp_path / "my_conf"
    (conf / "device").mkdir(parents=True)
    (conf / "device" / "rtx3090.yaml").write_text(RTX3090)
    proc = run_cli(["--config-dir", str(conf), "system=gpus", "model=mlp",
                    "devices=[a100,rtx3090]", "gpus.robust_samples=0"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    [report] = (tmp_path / "outputs" / "artifacts" / "simulate").glob("*/report.json")
    r = json.loads(report.read_text())
    assert r["devices"] == ["a100", "rtx3090"]
    # Its kernel times came from its spec sheet through the fitted model; a missing field is
    # one line naming it.
    (conf / "device" / "rtx3090.yaml").write_text(RTX3090.replace("sms: 82\n", ""))
    proc = run_cli(["--config-dir", str(conf), "system=gpus", "model=mlp",
                    "devices=[a100,rtx3090]"], tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("error: device.rtx3090.sms has no value: set it in its "
                                   "config file or on the command line (device.rtx3090.sms=...)")


@pytest.mark.parametrize(("args", "line"), [
    (["experiment=0"], "an experiment is added, not overridden: +experiment=0 (choices: "),
    (["experiment=fig3"], "+experiment=fig3"),
])
def test_an_experiment_without_its_plus_is_one_line(args: list[str], line: str) -> None:
    assert line in cli.experiment_overridden(args)
    assert cli.experiment_overridden(["+experiment=fig3", "experiment.only=[a]"]) is None


def test_an_experiment_refuses_a_stage_list(tmp_path: Path) -> None:
    from pimbuild.paper import experiments

    cfg = make_cfg(tmp_path, ["+experiment=fig3", "stages=[lower]"])
    with pytest.raises(PimbuildError, match=r"^stages=\[lower\]: an experiment builds every "):
        experiments.run(cfg, ["+experiment=fig3", "stages=[lower]"], tmp_path)


@pytest.mark.parametrize(("detail", "line"), [
    ("Invalid value assigned: int is not a ListConfig, list or tuple.",
     "sim.cores_sweep is a list: write sim.cores_sweep=[64]"),
])
def test_a_list_given_one_value_says_how_to_write_it(detail: str, line: str) -> None:
    from hydra.errors import ConfigCompositionException

    e = ConfigCompositionException(f"Error merging override sim.cores_sweep=64\n{detail}")
    assert cli.hydra_error_line(e) == line


def test_the_config_reference_lists_every_option_help_lists() -> None:
    """docs/config.md's table of groups names each group's options, as ``--help`` does."""
    rows = {}
    for line in (REPO / "docs" / "config.md").read_text().splitlines():
        cells = line.split(" | ")
        if line.startswith("| `") and len(cells) >= 3:
            named = {w for quoted in re.findall(r"`([^`]+)`", cells[1]) for w in quoted.split()}
            rows[cells[0].strip("| `")] = named
    for group in usage.GROUPS:
        if group in ("device", "tp_link"):
            continue
        assert group in rows, group
        missing = set(usage.choices(group)) - rows[group]
        assert not missing, f"docs/config.md's {group} row misses {sorted(missing)}"
    assert set(usage.choices("device")) <= rows["device"]


def test_a_users_file_named_like_a_shipped_option_is_refused(tmp_path: Path) -> None:
    (tmp_path / "device").mkdir()
    (tmp_path / "device" / "mine.yaml").write_text("name: Mine\n")
    assert cli.shadowed_option(["--config-dir", str(tmp_path)]) is None
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "relu.yaml").write_text("name: relu\n")
    line = cli.shadowed_option(["--config-dir", str(tmp_path), "model=relu"])
    assert line is not None and "relu.yaml has the name of the model option" in line
    assert "relu_mine.yaml" in line
