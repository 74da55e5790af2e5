"""Models nobody on the team wrote: HuggingFace ``transformers`` architectures at tiny
configs (random weights) through both targets (not a test; about 20 minutes).

    pip install transformers          # into the venv, beside torch==2.13.0
    .venv/bin/python bench/hf_models.py [--gpus] [--only gpt2,bert]
    .venv/bin/python bench/hf_models.py --only gpt2_768,bert_768,resnet_64 \
        --policies torchpim,torchpim_c5

Each model is built with ``model.recipe=hf_models:<name>`` (this directory on PYTHONPATH)
through the whole PIM pipeline, once per ``--policies`` entry, and with ``--gpus`` also
through ``system=gpus devices=[a100,l40s]``; a row is the build's exit status and its summary
lines (speedup, agreement, the check against eager) or its one ``error:`` line. The tiny
configs test that a model builds; the ``*_768`` / ``*_64`` ones have real layer widths, where
PIM can gain, and judge a policy on models it was not fitted to (the policy table: speedup,
the oracle's, agreement with the ground truth). Writes outputs/bench/hf_models.md.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import torch

from pimbuild.recipes import Recipe
from pimbuild.recipes.hf import Call  # the model called with keyword inputs, one field out

HERE = Path(__file__).parent


def _ids(n: int, vocab: int = 128) -> torch.Tensor:
    return torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(0))


def _recipe(config: str, model: str, field: str, inputs: dict[str, torch.Tensor],
            **kw) -> Recipe:
    import transformers

    torch.manual_seed(0)
    cfg = getattr(transformers, config)(**kw)
    m = getattr(transformers, model)(cfg).eval()
    return Recipe(Call(m, field, list(inputs)), inputs)


LM = dict(vocab_size=128)
DECODER = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, max_position_embeddings=64, **LM)


def _lm(config: str, model: str, **kw):
    return lambda n=16: _recipe(config, model, "logits", {"input_ids": _ids(n)}, **kw)


gpt2 = _lm("GPT2Config", "GPT2LMHeadModel", n_embd=64, n_layer=2, n_head=4, n_positions=64,
           **LM)
llama = _lm("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2, **DECODER)
mistral = _lm("MistralConfig", "MistralForCausalLM", num_key_value_heads=2, **DECODER)
qwen2 = _lm("Qwen2Config", "Qwen2ForCausalLM", num_key_value_heads=2, **DECODER)
gemma = _lm("GemmaConfig", "GemmaForCausalLM", num_key_value_heads=1, head_dim=16, **DECODER)
phi = _lm("PhiConfig", "PhiForCausalLM", **DECODER)
gpt_neox = _lm("GPTNeoXConfig", "GPTNeoXForCausalLM", **DECODER)
gptj = _lm("GPTJConfig", "GPTJForCausalLM", n_embd=64, n_layer=2, n_head=4, rotary_dim=8,
           n_positions=64, **LM)
opt = _lm("OPTConfig", "OPTForCausalLM", hidden_size=64, ffn_dim=128, num_hidden_layers=2,
          num_attention_heads=4, word_embed_proj_dim=64, max_position_embeddings=64, **LM)
falcon = _lm("FalconConfig", "FalconForCausalLM", hidden_size=64, num_hidden_layers=2,
             num_attention_heads=4, **LM)
bloom = _lm("BloomConfig", "BloomForCausalLM", hidden_size=64, n_layer=2, n_head=4, **LM)
mamba = _lm("MambaConfig", "MambaForCausalLM", hidden_size=64, state_size=8,
            num_hidden_layers=2, **LM)
# mixtures of experts, with transformers' batched experts (a gather of each token's experts'
# weights and a batched matmul; its default loops over the experts a batch reaches, which
# depends on the data)
MOE = dict(num_key_value_heads=2, experts_implementation="batched_mm", **DECODER)
mixtral = _lm("MixtralConfig", "MixtralForCausalLM", num_local_experts=4,
              num_experts_per_tok=2, **MOE)
qwen2_moe = _lm("Qwen2MoeConfig", "Qwen2MoeForCausalLM", num_experts=4, num_experts_per_tok=2,
                moe_intermediate_size=64, shared_expert_intermediate_size=64, **MOE)
ENCODER = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
               intermediate_size=128, max_position_embeddings=64, **LM)


def bert(n: int = 16) -> Recipe:
    mask = torch.ones(1, n, dtype=torch.long)
    mask[0, -3:] = 0  # padding
    return _recipe("BertConfig", "BertModel", "last_hidden_state",
                   {"input_ids": _ids(n), "attention_mask": mask}, **ENCODER)


def roberta(n: int = 16) -> Recipe:
    return _recipe("RobertaConfig", "RobertaModel", "last_hidden_state",
                   {"input_ids": _ids(n) + 2}, **ENCODER)


SEQ2SEQ = dict(d_model=64, encoder_attention_heads=4, decoder_attention_heads=4,
               encoder_layers=1, decoder_layers=1, encoder_ffn_dim=128, decoder_ffn_dim=128,
               **LM)


def t5(n: int = 16) -> Recipe:
    return _recipe("T5Config", "T5ForConditionalGeneration", "logits",
                   {"input_ids": _ids(n), "decoder_input_ids": _ids(8)}, d_model=64, d_kv=16,
                   d_ff=128, num_layers=2, num_heads=4, **LM)


def bart(n: int = 16) -> Recipe:
    return _recipe("BartConfig", "BartForConditionalGeneration", "logits",
                   {"input_ids": _ids(n), "decoder_input_ids": _ids(8)},
                   max_position_embeddings=64, **SEQ2SEQ)


def whisper(n: int = 32) -> Recipe:
    return _recipe("WhisperConfig", "WhisperModel", "last_hidden_state",
                   {"input_features": torch.randn(1, 16, n),
                    "decoder_input_ids": _ids(4)},
                   num_mel_bins=16, max_source_positions=n // 2, pad_token_id=0,
                   bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, **SEQ2SEQ)


def _image(config: str, model: str, n: int, **kw) -> Recipe:
    return _recipe(config, model, "logits", {"pixel_values": torch.randn(1, 3, n, n)},
                   num_labels=10, **kw)


def vit(n: int = 32) -> Recipe:
    return _image("ViTConfig", "ViTForImageClassification", n, hidden_size=64,
                  num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                  image_size=n, patch_size=8)


def resnet(n: int = 32) -> Recipe:
    return _image("ResNetConfig", "ResNetForImageClassification", n, embedding_size=16,
                  hidden_sizes=[16, 32], depths=[1, 1])


def convnext(n: int = 32) -> Recipe:
    return _image("ConvNextConfig", "ConvNextForImageClassification", n,
                  hidden_sizes=[16, 32], depths=[1, 1], num_stages=2)


def swin(n: int = 32) -> Recipe:
    return _image("SwinConfig", "SwinForImageClassification", n, image_size=n, patch_size=4,
                  embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=4)


# Real widths, one layer: GPT-2 small, BERT base, a LLaMA-style decoder at 1024, ViT-B on
# 16 patches, a ResNet stage at 56x56x64.
gpt2_768 = _lm("GPT2Config", "GPT2LMHeadModel", n_embd=768, n_layer=1, n_head=12,
               n_positions=64, vocab_size=2048)
llama_1024 = _lm("LlamaConfig", "LlamaForCausalLM", hidden_size=1024, intermediate_size=2816,
                 num_hidden_layers=1, num_attention_heads=16, num_key_value_heads=4,
                 max_position_embeddings=64, vocab_size=2048)


def bert_768(n: int = 32) -> Recipe:
    return _recipe("BertConfig", "BertModel", "last_hidden_state", {"input_ids": _ids(n)},
                   hidden_size=768, num_hidden_layers=1, num_attention_heads=12,
                   intermediate_size=3072, max_position_embeddings=64, vocab_size=2048)


def vit_768(n: int = 32) -> Recipe:
    return _image("ViTConfig", "ViTForImageClassification", n, hidden_size=768,
                  num_hidden_layers=1, num_attention_heads=12, intermediate_size=3072,
                  image_size=n, patch_size=8)


def resnet_64(n: int = 112) -> Recipe:
    return _image("ResNetConfig", "ResNetForImageClassification", n, embedding_size=64,
                  hidden_sizes=[64], depths=[1])


MODELS = {"gpt2": 16, "llama": 16, "mistral": 16, "qwen2": 16, "gemma": 16, "phi": 16,
          "gpt_neox": 16, "gptj": 16, "opt": 16, "falcon": 16, "bloom": 16, "mamba": 16,
          "bert": 16, "roberta": 16, "t5": 16, "bart": 16, "whisper": 32, "vit": 32,
          "resnet": 32, "convnext": 32, "swin": 32, "mixtral": 16, "qwen2_moe": 16}
WIDE = {"gpt2_768": 16, "bert_768": 32, "llama_1024": 16, "vit_768": 32, "resnet_64": 112}
GPUS = ["system=gpus", "devices=[a100,l40s]"]


def build(name: str, n: int, extra: list[str], store: Path, run: Path,
          module: str = "hf_models") -> dict:
    """One ``pimbuild`` run of ``<module>:<name>`` (a module of this directory) at size ``n``:
    its exit status, seconds and summary lines (or its ``error:`` line)."""
    cmd = [str(Path(sys.executable).parent / "pimbuild"), "model=relu", f"model.name={name}",
           f"model.recipe={module}:{name}", f"model.size={{n:{n}}}", f"store={store}",
           f"hydra.run.dir={run}", *extra]
    env = {**os.environ, "PYTHONPATH": f"{HERE}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    began = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [line.strip() for line in (proc.stdout + proc.stderr).splitlines()]
    keep = [line for line in lines if line.startswith(("error:", "speedup", "agreement",
                                                       "partitioned", "note:", "offloaded",
                                                       "CPU-only program"))
            or " with planner " in line]
    policy = next((e.split("=", 1)[1] for e in extra if e.startswith("policy=")), "")
    return {"model": name, "target": "gpus" if "system=gpus" in extra else "pim",
            "policy": policy, "rc": proc.returncode,
            "seconds": time.perf_counter() - began, "lines": keep}


def numbers(row: dict) -> dict:
    """The policy's speedup, the oracle's, and agreement (agree/total, FP, FN) of a PIM row."""
    text = " ".join(row["lines"])
    found = {key: re.search(pattern, text) for key, pattern in (
        ("speedup", r"speedup ([0-9.]+)x"), ("oracle", r"oracle ([0-9.]+)x"),
        ("agreement", r"ground truth ([0-9]+/[0-9]+ \(FP [0-9]+, FN [0-9]+\))"))}
    return {k: m.group(1) if m else "-" for k, m in found.items()}


def policy_table(rows: list[dict], policies: list[str]) -> list[str]:
    pim = [r for r in rows if r["target"] == "pim"]
    lines = ["", "## Policies", "", "| model | " + " | ".join(
        f"{p}: speedup / agreement" for p in policies) + " | oracle |",
        "|---|" + "---|" * len(policies) + "---:|"]
    for name in dict.fromkeys(r["model"] for r in pim):
        by = {r["policy"]: numbers(r) for r in pim if r["model"] == name}
        cells = [f"{by[p]['speedup']}x / {by[p]['agreement']}" if p in by else "-"
                 for p in policies]
        oracle = next((v["oracle"] for v in by.values() if v["oracle"] != "-"), "-")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {oracle}x |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", action="store_true", help="also build with system=gpus")
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--set", action="append", default=[], metavar="OVERRIDE",
                        help="an override for every build (repeatable): pim=fitted_paper")
    parser.add_argument("--policies", default="torchpim",
                        help="comma-separated PIM policies, each built for every model")
    parser.add_argument("--store", type=Path, default=Path("outputs/artifacts"))
    parser.add_argument("--out", type=Path, default=Path("outputs/bench"))
    args = parser.parse_args()
    try:
        import transformers
    except ImportError:
        sys.exit("error: bench/hf_models.py needs transformers: pip install transformers")
    sizes = {**MODELS, **WIDE}
    names = [m for m in args.only.split(",") if m] or list(MODELS)
    unknown = [m for m in names if m not in sizes]
    if unknown:
        sys.exit(f"error: no model {', '.join(unknown)}: choose from {', '.join(sizes)}")
    policies = [p for p in args.policies.split(",") if p]
    rows = []
    for name in names:
        runs = [[f"policy={p}"] for p in policies] + ([GPUS] if args.gpus else [])
        for extra in runs:
            tag = extra[0].split("=", 1)[1]
            rows.append(build(name, sizes[name], [*extra, *args.set], args.store.resolve(),
                              (args.out / "hf_runs" / f"{name}-{tag}").resolve()))
            print(f"{name} ({rows[-1]['target']} {rows[-1]['policy']}): rc {rows[-1]['rc']}, "
                  f"{rows[-1]['seconds']:.0f} s", flush=True)
    lines = ["# bench/hf_models.py", "", f"transformers {transformers.__version__}, torch "
             f"{torch.__version__}.", "", "| model | target | policy | rc | s | summary |",
             "|---|---|---|---:|---:|---|"]
    lines += [f"| {r['model']} | {r['target']} | {r['policy']} | {r['rc']} | "
              f"{r['seconds']:.0f} | {'<br>'.join(r['lines']).replace('|', '/')} |"
              for r in rows]
    lines += policy_table(rows, policies)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "hf_models.md").write_text("\n".join(lines) + "\n")
    print(f"{sum(r['rc'] == 0 for r in rows)}/{len(rows)} builds succeeded; "
          f"{args.out / 'hf_models.md'}")


if __name__ == "__main__":
    main()
