"""A decoder-only LLM's shapes, read from its Hugging Face ``config.json``, and the bytes its
weights and KV cache take (what bounds an engine's batch).

A mixture-of-experts model (``num_local_experts`` or ``num_experts``, with
``num_experts_per_tok``) has, in every layer, a router and ``experts`` gated MLPs of
``moe_intermediate_size`` (else ``intermediate_size``), ``top_k`` of them per token, and a
shared expert where ``shared_expert_intermediate_size`` says (Qwen2-MoE); a model whose dense
and sparse layers alternate (``decoder_sparse_step`` > 1, ``mlp_only_layers``) is refused."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from pimbuild.core.errors import ConfigError
from pimbuild.core.schema import Strict, check, number

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4}
# the precisions as the kernel data name them
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


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
    experts: int = 0  # 0: a dense model (one gated MLP of ``ffn`` per layer)
    top_k: int = 0  # experts each token is routed to
    shared_ffn: int = 0  # a shared expert's gated MLP, every token (0: none)

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def mlp_weights(self) -> int:
        """Elements of one layer's MLP: the gated MLP, or the router, experts and shared
        expert."""
        d = self.hidden
        if not self.moe:
            return 3 * d * self.ffn
        return d * self.experts + self.experts * 3 * d * self.ffn + 3 * d * self.shared_ffn

    @property
    def weight_bytes(self) -> int:
        """Every parameter once: embedding, LM head, per layer QKV, O, gate+up, down, norms."""
        d, hd = self.hidden, self.head_dim
        layer = d * (self.heads + 2 * self.kv_heads) * hd + self.heads * hd * d \
            + self.mlp_weights + 2 * d
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
    check(HfConfig, {k: v for k, v in c.items() if v is not None}, str(path))
    heads = c["num_attention_heads"]
    if heads % (c.get("num_key_value_heads") or heads):
        raise ConfigError(f"{path}: num_attention_heads ({heads}) must be a multiple of "
                          f"num_key_value_heads ({c['num_key_value_heads']})")
    dtype = c.get("torch_dtype") or c.get("dtype") or "bfloat16"
    fields = {"ffn": c["intermediate_size"], **experts(c, path)}
    return LlmShape(name=str(c.get("_name_or_path") or path.stem), layers=c["num_hidden_layers"],
                    hidden=c["hidden_size"], heads=heads,
                    kv_heads=c.get("num_key_value_heads") or heads,
                    head_dim=c.get("head_dim") or c["hidden_size"] // heads,
                    vocab=c["vocab_size"], dtype_bytes=DTYPE_BYTES[dtype], dtype=DTYPES[dtype],
                    tied=bool(c.get("tie_word_embeddings")), **fields)


Size = number((">=", 1, 2**24), integer=True)  # a dimension or count of a model
Count = number((">=", 0, 2**24), integer=True)


class HfConfig(Strict):
    """What the engine simulation reads of a Hugging Face ``config.json`` (its other fields,
    and a field set to null, are left alone): exact whole numbers in range."""

    model_config = {**Strict.model_config, "extra": "allow"}  # the format is not ours
    hidden_size: Size
    num_attention_heads: Size
    num_hidden_layers: Size
    intermediate_size: Size
    vocab_size: Size
    num_key_value_heads: Size | None = None
    head_dim: Size | None = None
    torch_dtype: Literal[tuple(DTYPE_BYTES)] | None = None  # type: ignore[valid-type]
    dtype: Literal[tuple(DTYPE_BYTES)] | None = None  # type: ignore[valid-type]
    num_local_experts: Count | None = None
    num_experts: Count | None = None
    num_experts_per_tok: Count | None = None
    moe_intermediate_size: Count | None = None
    shared_expert_intermediate_size: Count | None = None


def experts(c: dict, path: Path) -> dict:
    """A mixture-of-experts config's fields of ``LlmShape`` (none for a dense model)."""
    n = c.get("num_local_experts") or c.get("num_experts")
    if not n:
        return {}
    k = c.get("num_experts_per_tok")
    if not k or k > n:
        raise ConfigError(f"{path}: a mixture of {n} experts needs num_experts_per_tok from "
                          f"1 to {n} (got {k!r})")
    if (c.get("decoder_sparse_step") or 1) != 1 or c.get("mlp_only_layers"):
        raise ConfigError(f"{path}: dense and sparse layers alternate (decoder_sparse_step, "
                          f"mlp_only_layers): the engine simulation times models whose "
                          f"every layer is sparse")
    return {"experts": n, "top_k": k,
            "ffn": c.get("moe_intermediate_size") or c["intermediate_size"],
            "shared_ffn": c.get("shared_expert_intermediate_size") or 0}


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
        mlp = 3 * (m.ffn * m.top_k + m.shared_ffn) + m.experts if m.moe else 3 * m.ffn
        per_token = m.hidden * 2 + (m.heads + 2 * m.kv_heads) * m.head_dim + mlp
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
