"""The config tree composes, and bad overrides fail while Hydra composes it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException

from pimbuild.core.errors import ConfigError
from tests.conftest import make_cfg

MODELS = sorted(p.stem for p in
                (Path(__file__).parent.parent / "pimbuild" / "conf" / "model").glob("*.yaml"))


def test_defaults_compose(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path, [])
    assert cfg.model.name == "softmax"
    assert cfg.lowering.fusion == "controlled"
    assert cfg.pim.cores == 128
    assert cfg.policy.theta_ratio == 0.12
    assert cfg.sim.copy_model == "upper_bound"
    assert list(cfg.stages) == ["simulate"]


@pytest.mark.parametrize("model", MODELS)
def test_every_model_composes_with_its_recipe(tmp_path: Path, model: str) -> None:
    from pimbuild import recipes

    cfg = make_cfg(tmp_path, [f"model={model}"])
    assert cfg.model.name == model
    assert callable(recipes.resolve(cfg.model.recipe))


def test_every_paper_benchmark_has_a_config() -> None:
    from tests.test_recipes import GOLDEN_NESTS

    assert len(GOLDEN_NESTS) == 17  # the paper's 15 operators and 2 layers
    assert set(GOLDEN_NESTS) | {"llama7b", "gptj6b"} <= set(MODELS)


@pytest.mark.parametrize("override", ["pim.cores=abc", "lowering.fastmath=maybe",
                                      "model.size.n=big", "policy.theta_ratio=high"])
def test_bad_override_fails_at_composition(tmp_path: Path, override: str) -> None:
    with pytest.raises(ConfigCompositionException):
        make_cfg(tmp_path, ["model=relu", override])


def test_unknown_model_lists_the_choices(tmp_path: Path) -> None:
    with pytest.raises(MissingConfigException) as err:
        make_cfg(tmp_path, ["model=resnet9000"])
    assert "softmax" in str(err.value) and "gemv" in str(err.value)


def test_torchpim_c5_is_a_point_of_the_agreement_grid(tmp_path: Path) -> None:
    """``policy=torchpim_c5`` ships the agreement experiment's fit with C5: the paper's rule
    (the torchpim module) at a point of the grid the experiment searches, with C5's
    I_compute above I_min (at or below it, C5 would offload whatever passes C1)."""
    from pimbuild.paper.experiments import agreement

    p = make_cfg(tmp_path, ["policy=torchpim_c5"]).policy
    assert p.name == "torchpim" and p.c1 == "model" and p.c4 == "read_later"
    assert p.theta_ratio in agreement.THETA_RATIOS and p.sigma in agreement.SIGMAS
    assert p.i_min in agreement.I_MINS and p.i_compute in agreement.I_COMPUTES
    assert p.i_compute > p.i_min


def test_summary_names_c5_when_the_rule_uses_it() -> None:
    from pimbuild.targets.offload.protocol import Sides
    from pimbuild.targets.offload.summary import report_lines

    pim = Sides("host", "pim", "cores")
    r = {"policy": "torchpim", "i_compute": 16.0, "speedup": 2.0, "cores": 128,
         "t_hybrid_s": 1e-3, "t_host_s": 5e-4, "t_pim_s": 4e-4, "t_copy_s": 1e-4,
         "t_switch_s": 0.0, "copy_model": "upper_bound", "n_region": 2, "offloaded": [0],
         "nests": [{}], "offloaded_sources": ["mm"], "captured_share_of_cpu_time": 0.9,
         "baselines": {"cpu": 1.0}, "sweep": [{"cores": 128, "torchpim": {"speedup": 2.0}}],
         "agreement": {"agree": 1, "total": 1, "false_positives": 0, "false_negatives": 0},
         "hybrid_check": {"max_rel_error": 0.0}}
    assert "with policy torchpim + C5 (I_compute 16) on 128" in report_lines(r, pim)[0]
    assert "C5" not in report_lines({**r, "i_compute": None}, pim)[0]
    oracle = {**r, "policy": "oracle", "sweep": [{"cores": 128, "oracle": {"speedup": 2.0}}]}
    assert "C5" not in report_lines(oracle, pim)[0]  # the oracle does not apply the rule


def test_summary_flags_a_host_program_slower_than_eager() -> None:
    from pimbuild.targets.offload.summary import SLOW_HOST, slow_host_note

    over = {"speedup": 1.5, "cpu_only_over_eager": 0.9, "ratio_p25": 0.85,
            "ratio_p75": 0.95, "rounds": 10}
    assert "speedup over eager 1.500x" in slow_host_note(over)
    assert "inflates" not in slow_host_note(over)
    slow = {**over, "cpu_only_over_eager": SLOW_HOST + 0.2}
    assert "inflates the speedup over CPU-only by 1.30x" in slow_host_note(slow)
    assert slow_host_note(None) == ""


def _user_model(tmp_path: Path, text: str) -> list[str]:
    """Overrides that pick ``text`` as model ``mine`` from a config dir of the user's own."""
    (tmp_path / "conf" / "model").mkdir(parents=True)
    (tmp_path / "conf" / "model" / "mine.yaml").write_text(text)
    return [f"hydra.searchpath=[file://{tmp_path / 'conf'}]", "model=mine"]


def test_a_user_model_file_may_leave_out_size_dtype_seed_and_defaults(tmp_path: Path) -> None:
    from pimbuild.build.config import validate

    cfg = make_cfg(tmp_path, _user_model(tmp_path, "name: mine\n"
                                         "recipe: pimbuild.recipes.operators:relu\n"))
    validate(cfg)
    assert (cfg.model.dtype, cfg.model.seed, dict(cfg.model.size)) == ("float32", 0, {})


@pytest.mark.parametrize("left_out", ["name", "recipe"])
def test_a_user_model_file_without_a_required_key_is_one_line(tmp_path: Path,
                                                              left_out: str) -> None:
    from pimbuild.build.config import validate
    from pimbuild.core.errors import ConfigError

    lines = {"name": "name: mine\n", "recipe": "recipe: pimbuild.recipes.operators:relu\n"}
    cfg = make_cfg(tmp_path, _user_model(tmp_path, "".join(v for k, v in lines.items()
                                                           if k != left_out)))
    with pytest.raises(ConfigError, match=rf"^model\.{left_out} has no value: set it"):
        validate(cfg)


def test_the_gpu_planner_is_an_option_of_the_gpus_group(tmp_path: Path) -> None:
    from pimbuild.build.config import validate

    assert make_cfg(tmp_path, ["system=gpus"]).gpus.planner == "throughput"
    cfg = make_cfg(tmp_path, ["system=gpus", "gpus.planner=latency"])
    validate(cfg)
    assert cfg.gpus.planner == "latency" and cfg.policy.name == "torchpim"


@pytest.mark.parametrize("override", ["link.gbps=inf", "serve.rate=inf", "pim.freq_ghz=nan",
                                      "tp_link.latency_us=-inf", "device.a100.mem_gbps=nan"])
def test_a_non_finite_number_is_refused_as_non_finite(tmp_path: Path, override: str) -> None:
    from pimbuild.build.config import validate

    key, _, value = override.partition("=")
    group, _, field = key.rpartition(".")
    expected = rf"^{re.escape(key)} must be a finite number \(got {re.escape(value)}\): give " \
        rf"a value [>=]+ " if not group.startswith("device.") else \
        rf"^{re.escape(group)}: '{field}' must be a finite number \(got {value}\)"  # its schema
    with pytest.raises(ConfigError, match=expected):
        validate(make_cfg(tmp_path, ["system=gpus", override]))
