"""Meta's attention (llama/model.py, complex rotary) at LLaMA-7B width, 128 tokens: lowered /
eager forward, one thread, alternated (bench/llm.py's method), for the two host-code facts of
2026-12-03 (docs/measurements/meta_attention_epyc.md):

1. transforms.NARROW 0 (the fold of the pair view into wq / wk allowed) against 16;
2. register block 1 (off) against 4, and a 128 x 4096 x 4096 projection at 2 to 32.

    PYTHONPATH=docs/measurements/meta_attention_epyc .venv/bin/python \\
        docs/measurements/meta_attention_epyc/measure.py
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import torch
from hydra import compose, initialize_config_module

from pimbuild import frontend, jit, lower, transforms
from pimbuild.cli import CONFIG_MODULE
from pimbuild.profile import reuse_freed_memory


def ratio(recipe: str, block: int, rounds: int = 12) -> tuple[float, float]:
    """Medians (after two warm-up rounds) of the lowered forward and eager's, in seconds."""
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose("config", overrides=["model=relu", f"model.recipe=meta:{recipe}",
                                           "model.size={}"])
    p = lower.params(cfg)
    torch.set_num_threads(1)
    reuse_freed_memory()
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        lower.lower(p, out, out / "failure")
        signature = json.loads((out / "signature.json").read_text())
        engine = jit.compile_scf(out / "scf.mlir", out / "failure", block)
    args, _ = frontend.materialize(p.model, signature)
    recipe_ = frontend.build_recipe(p.model)
    lowered, eager = [], []
    with torch.no_grad():
        for _ in range(rounds):
            start = time.perf_counter()
            jit.invoke(engine, signature["function"], args, signature["outputs"])
            lowered.append(time.perf_counter() - start)
            start = time.perf_counter()
            recipe_.module(*recipe_.inputs.values())
            eager.append(time.perf_counter() - start)
    return statistics.median(lowered[2:]), statistics.median(eager[2:])


def show(label: str, recipe: str, block: int) -> None:
    lowered, eager = ratio(recipe, block)
    print(f"{label}: lowered {lowered * 1e3:.1f} ms, eager {eager * 1e3:.1f} ms, "
          f"ratio {lowered / eager:.2f}", flush=True)


def main() -> None:
    for _ in range(2):
        for narrow in (0, 16):
            transforms.NARROW = narrow
            show(f"attention_7b NARROW={narrow} block 4", "attention_7b", 4)
    transforms.NARROW = 16
    for _ in range(2):
        for block in (1, 4):
            show(f"attention_7b block {block}", "attention_7b", block)
    for block in (1, 2, 4, 8, 16, 32):
        show(f"linear_128 block {block}", "linear_128", block)


if __name__ == "__main__":
    main()
