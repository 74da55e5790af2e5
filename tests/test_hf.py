"""``model=hf``: a transformers architecture by name, shrunk, with the inputs its kind takes,
and the one line that refuses a name transformers does not have."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")  # the hf extra (in the test extra)

from pimbuild.core.errors import PimbuildError  # noqa: E402
from pimbuild.frontend import build_recipe  # noqa: E402
from pimbuild.frontend.lower import model_params  # noqa: E402
from tests.conftest import make_cfg  # noqa: E402


def _recipe(tmp_path: Path, *overrides: str):
    return build_recipe(model_params(make_cfg(tmp_path, ["model=hf", *overrides])))


@pytest.mark.parametrize(("arch", "inputs"), [
    ("LlamaForCausalLM", {"input_ids": (1, 16)}),
    ("BertModel", {"input_ids": (1, 16)}),
    ("T5ForConditionalGeneration", {"input_ids": (1, 16), "decoder_input_ids": (1, 8)}),
    ("ViTForImageClassification", {"pixel_values": (1, 3, 32, 32)}),
    ("WhisperForConditionalGeneration", {"input_features": (1, 16, 32),
                                         "decoder_input_ids": (1, 8)}),
    ("Wav2Vec2Model", {"input_values": (1, 6400)}),
])
def test_each_kind_gets_its_inputs(tmp_path: Path, arch: str, inputs: dict) -> None:
    r = _recipe(tmp_path, f"model.hf.arch={arch}")
    assert {k: tuple(v.shape) for k, v in r.inputs.items()} == inputs
    assert r.module(*r.inputs.values()).ndim >= 2  # logits or last_hidden_state


def test_config_fields_and_sizes_are_overrides(tmp_path: Path) -> None:
    r = _recipe(tmp_path, "model.hf.arch=LlamaForCausalLM", "+model.hf.config.hidden_size=32",
                "model.size.seq=5")
    assert r.module.model.config.hidden_size == 32 and r.inputs["input_ids"].shape == (1, 5)
    assert r.module.model.config.num_hidden_layers == 2  # the rest shrunk


def test_a_config_file_of_ones_own(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", '
                    '"n_embd": 48, "n_layer": 1, "n_head": 2, "vocab_size": 50, '
                    '"n_positions": 32}')
    r = _recipe(tmp_path, "model.hf.arch=GPT2LMHeadModel", f"model.hf.config_file={path}")
    assert r.module.model.config.n_embd == 48 and r.module.model.config.n_layer == 1


@pytest.mark.parametrize(("override", "message"), [
    ("model.hf.arch=Nonesuch", r"model.hf.arch=Nonesuch: transformers \S+ has no model class"),
    ("model.hf.output=pooler", r"output has no field pooler"),
    ("model.hf.arch=CLIPModel", r"CLIPModel's forward on input_ids alone failed"),
])
def test_a_bad_name_is_one_line(tmp_path: Path, override: str, message: str) -> None:
    with pytest.raises(PimbuildError, match=message) as err:
        _recipe(tmp_path, override)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_an_hf_model_builds_on_both_targets(run_build) -> None:
    for target in ([], ["system=gpus", "devices=[a100,l40s]"]):
        result = run_build(["model=hf", "model.hf.arch=BertModel", *target])
        assert "simulate" in result.manifest["stages"]
