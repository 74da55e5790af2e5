"""Model ``hf`` (``model=hf``): a Hugging Face ``transformers`` architecture at a small config
with random weights from the model's seed; nothing is downloaded.

``model.hf.arch`` names the class (``LlamaForCausalLM``, ``BertModel``,
``ViTForImageClassification``, ``WhisperForConditionalGeneration``...), ``model.hf.config_file``
a ``config.json`` of one's own (its sizes as they are), else the architecture's config shrunk to
``TINY`` (each size its config has); ``model.hf.config.<field>`` overrides either. The inputs
follow the model's ``main_input_name``: token ids (``model.size.seq`` of them), pixel values at
the config's image size, audio features or samples; an encoder-decoder also gets
``model.size.target`` decoder token ids. The forward returns one field of the output,
``model.hf.output`` or the first of ``logits`` and ``last_hidden_state`` it has. ``pip install
'pimbuild[hf]'``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from pimbuild.recipes import Recipe

# Each size the architecture's config has, unless a config file or an override sets it: a
# model a CPU lowers in seconds.
TINY: dict[str, Any] = {
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128,
    "max_position_embeddings": 64, "head_dim": 16, "n_embd": 64, "n_layer": 2, "n_head": 4,
    "n_positions": 64, "rotary_dim": 8, "d_model": 64, "d_ff": 128, "d_kv": 16,
    "num_layers": 2, "num_heads": 4, "encoder_layers": 1, "decoder_layers": 1,
    "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_ffn_dim": 128,
    "decoder_ffn_dim": 128, "num_mel_bins": 16, "max_source_positions": 16,
    "max_target_positions": 16, "image_size": 32, "patch_size": 4, "embed_dim": 16,
    "embedding_size": 16, "hidden_sizes": [16, 32], "depths": [1, 1], "num_stages": 2,
    "window_size": 4, "state_size": 8, "conv_dim": [32, 32], "conv_stride": [5, 2],
    "conv_kernel": [10, 3], "num_feat_extract_layers": 2, "num_conv_pos_embeddings": 16,
    "num_conv_pos_embedding_groups": 4,
}
LIST_TINY = {"num_heads": [2, 2]}  # where the config holds one per stage
OUTPUTS = ("logits", "last_hidden_state")


class Call(torch.nn.Module):
    """The model called with its keyword inputs (pimbuild passes them positionally, in the
    recipe's order), returning one field of its output."""

    def __init__(self, model: torch.nn.Module, field: str, names: list[str]) -> None:
        super().__init__()
        self.model, self.field, self.names = model, field, names

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return getattr(self.model(**dict(zip(self.names, args, strict=True))), self.field)


def config(cls: Any, hf: dict[str, Any]) -> Any:
    """The architecture's config: the file's, else its defaults shrunk; then the overrides."""
    overrides = dict(hf.get("config") or {})
    if hf.get("config_file"):
        base = json.loads(Path(hf["config_file"]).read_text())
        base = {k: v for k, v in base.items() if k not in ("architectures", "model_type")}
    else:
        probe = cls.config_class()
        base = {k: v for k, v in TINY.items() if hasattr(probe, k)
                and _listed(getattr(probe, k)) == _listed(v)}
        base |= {k: v for k, v in LIST_TINY.items() if _listed(getattr(probe, k, None))}
        base |= _token_ids(probe, base.get("vocab_size"))
    return cls.config_class(**{**base, **overrides})


def _listed(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def _token_ids(probe: Any, vocab: int | None) -> dict[str, Any]:
    """The config's special token ids moved inside a shrunk vocabulary (``id % vocab``), so
    that its embeddings hold them; lists of them kept where they fit."""
    if not vocab:
        return {}
    out: dict[str, Any] = {}
    for k, v in probe.to_dict().items():
        if k.endswith("_token_id") and isinstance(v, int) and v >= vocab:
            out[k] = v % vocab
        elif k.endswith("_tokens") and _listed(v) and all(isinstance(i, int) for i in v):
            out[k] = [i for i in v if i < vocab]
    return out


def inputs(model: Any, cfg: Any, seq: int, target: int) -> dict[str, torch.Tensor]:
    """What the model's forward takes, by its main input."""
    g = torch.Generator().manual_seed(0)
    vocab = getattr(cfg, "vocab_size", 128) or 128
    main = model.main_input_name
    if main == "input_ids":
        found = {"input_ids": torch.randint(0, vocab, (1, seq), generator=g)}
    elif main == "pixel_values":
        size = getattr(cfg, "image_size", 32)
        size = size if isinstance(size, int) else size[0]
        found = {"pixel_values": torch.randn(1, getattr(cfg, "num_channels", 3), size, size,
                                             generator=g)}
    elif main == "input_features":  # log-mel frames (Whisper: twice its source positions)
        frames = 2 * getattr(cfg, "max_source_positions", seq)
        found = {"input_features": torch.randn(1, cfg.num_mel_bins, frames, generator=g)}
    elif main == "input_values":  # raw audio samples
        found = {"input_values": torch.randn(1, 400 * seq, generator=g)}
    else:
        raise ValueError(f"{type(model).__name__} takes '{main}' first, which model=hf does "
                         f"not know how to make")
    if getattr(cfg, "is_encoder_decoder", False):
        found["decoder_input_ids"] = torch.randint(0, vocab, (1, target), generator=g)
    return found


def build(hf: dict[str, Any], seq: int = 16, target: int = 8) -> Recipe:
    import transformers

    arch = hf.get("arch")
    cls = getattr(transformers, str(arch), None)
    if cls is None or not hasattr(cls, "config_class"):
        raise ValueError(f"model.hf.arch={arch}: transformers {transformers.__version__} has "
                         f"no model class of that name")
    model = cls(config(cls, hf)).eval()
    found = inputs(model, model.config, seq, target)
    try:
        with torch.no_grad():
            out = model(**found)
    except Exception as e:  # the architecture's own code, on inputs it may not expect
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"{arch}'s forward on {', '.join(found)} alone failed ({first}); "
                         f"model=hf makes the model's main input, and an encoder-decoder's "
                         f"decoder ids: a model that needs more (a vision-text model) needs "
                         f"a recipe of its own") from None
    names = [hf["output"]] if hf.get("output") else [f for f in OUTPUTS if
                                                      getattr(out, f, None) is not None]
    if not names or getattr(out, names[0], None) is None:
        wanted = hf.get("output") or " or ".join(OUTPUTS)
        raise ValueError(f"{arch}'s output has no field {wanted} (model.hf.output names one)")
    return Recipe(Call(model, names[0], list(found)), found)
