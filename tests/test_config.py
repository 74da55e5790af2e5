"""The config tree composes, and bad overrides fail while Hydra composes it."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException, MissingConfigException

from tests.conftest import make_cfg

MODELS = sorted(p.stem for p in (Path(__file__).parent.parent / "conf" / "model").glob("*.yaml"))


def test_defaults_compose(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path, [])
    assert cfg.model.name == "softmax"
    assert cfg.lowering.fusion == "controlled"
    assert cfg.pim.cores == 128
    assert cfg.policy.theta_ratio == 0.12
    assert cfg.sim.copy_model == "upper_bound"
    assert list(cfg.targets) == ["simulate"]


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
