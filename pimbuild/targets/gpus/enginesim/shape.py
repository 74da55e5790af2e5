"""A decoder-only LLM's shapes, read from its Hugging Face ``config.json``, and the bytes its
weights and KV cache take (what bounds an engine's batch)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

from pimbuild.errors import ConfigError

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# the precisions as the kernel data name them
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
REQUIRED = ("hidden_size", "num_attention_heads", "num_hidden_layers", "intermediate_size",
            "vocab_size")


@dataclass(frozen=True)
class LlmShape:
    """What the step times and memory read of a dense LLaMA-style model (gated MLP, GQA)."""
    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    dtype_bytes: int = 2
    dtype: str = "bf16"  # the kernel data's name of its precision
    tied: bool = False  # input embedding and LM head share one matrix
    # a pipeline stage holds the embedding (the first) or the final norm and LM head (the last)
    embed: bool = True
    head: bool = True

    @property
    def weight_bytes(self) -> int:
        """Every parameter once: embedding, LM head, per layer QKV, O, gate+up, down, norms."""
        d, hd = self.hidden, self.head_dim
        layer = d * (self.heads + 2 * self.kv_heads) * hd + self.heads * hd * d \
            + 3 * d * self.ffn + 2 * d
        matrices = 1 if self.tied and self.embed and self.head else self.embed + self.head
        return self.dtype_bytes * (self.layers * layer + matrices * self.vocab * d
                                   + self.head * d)

    def stages(self, first: int) -> tuple[LlmShape, LlmShape]:
        """The model split after its first ``first`` layers (a pipeline of two stages)."""
        if not 0 < first < self.layers:
            raise ConfigError(f"a split of {self.layers} layers needs 1 to {self.layers - 1} "
                              f"in the first stage (got {first})")
        return (replace(self, layers=first, head=False),
                replace(self, layers=self.layers - first, embed=False))

    @property
    def kv_bytes_per_token(self) -> int:
        """Keys and values of one position over every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * self.dtype_bytes


def load(path: Path) -> LlmShape:
    """The shapes of a Hugging Face ``config.json``; a ConfigError naming what is wrong."""
    path = Path(path)
    try:
        c = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read model config {path}: {e}") from None
    if not isinstance(c, dict):
        raise ConfigError(f"{path} is not a Hugging Face config (a JSON object)")
    if c.get("num_experts") or c.get("num_local_experts"):
        raise ConfigError(f"{path} is a mixture-of-experts model: the engine simulation "
                          f"times dense models only")
    missing = [k for k in REQUIRED if k not in c]
    if missing:
        raise ConfigError(f"{path} lacks {', '.join(missing)}")
    for k in (*REQUIRED, "num_key_value_heads", "head_dim"):
        v = c.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ConfigError(f"{path}: {k} must be a whole number >= 1 (got {v!r})")
    heads = c["num_attention_heads"]
    dtype = c.get("torch_dtype") or c.get("dtype") or "bfloat16"
    if dtype not in DTYPE_BYTES:
        raise ConfigError(f"{path}: torch_dtype {dtype!r} is none of "
                          f"{', '.join(DTYPE_BYTES)}")
    return LlmShape(name=str(c.get("_name_or_path") or path.stem), layers=c["num_hidden_layers"],
                    hidden=c["hidden_size"], heads=heads,
                    kv_heads=c.get("num_key_value_heads") or heads,
                    head_dim=c.get("head_dim") or c["hidden_size"] // heads,
                    ffn=c["intermediate_size"], vocab=c["vocab_size"],
                    dtype_bytes=DTYPE_BYTES[dtype], dtype=DTYPES[dtype],
                    tied=bool(c.get("tie_word_embeddings")))


@dataclass(frozen=True)
class Memory:
    """A device's KV-cache budget as vLLM sizes it: its memory times the utilisation, less the
    weights, the peak activations of the largest step and a runtime reserve (CUDA context,
    library workspaces, CUDA graphs: an assumption)."""
    memory_bytes: float
    utilisation: float = 0.9
    reserve_bytes: float = 1.0e9

    def activation_bytes(self, m: LlmShape, max_batched_tokens: int, max_seqs: int) -> float:
        """One layer's largest live tensors at ``max_batched_tokens`` (the residual stream,
        QKV, gate+up and its product) and the fp32 logits of ``max_seqs`` sequences."""
        per_token = m.hidden * 2 + (m.heads + 2 * m.kv_heads) * m.head_dim + 3 * m.ffn
        return m.dtype_bytes * max_batched_tokens * per_token + 4 * max_seqs * m.vocab * m.head

    def kv_blocks(self, m: LlmShape, block_size: int, max_batched_tokens: int,
                  max_seqs: int) -> int:
        """Blocks of ``block_size`` positions that fit; a ConfigError where the model does
        not fit at all."""
        free = self.memory_bytes * self.utilisation - m.weight_bytes - self.reserve_bytes \
            - self.activation_bytes(m, max_batched_tokens, max_seqs)
        blocks = int(free // (m.kv_bytes_per_token * block_size))
        if blocks < 1:
            raise ConfigError(
                f"{m.name} does not fit: {m.weight_bytes / 1e9:.1f} GB of weights on "
                f"{self.memory_bytes / 1e9:.1f} GB at utilisation {self.utilisation} leave "
                f"no room for a KV block")
        return blocks
