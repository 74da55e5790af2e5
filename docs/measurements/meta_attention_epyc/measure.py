"""Meta's attention (llama/model.py, complex rotary) at LLaMA-7B width, 128 tokens: lowered /
eager forward, one thread, alternated (``bench/llm.py``'s ``forward_ratio``), for the two
host-code facts of 2026-12-03 (docs/measurements/meta_attention_epyc.md):

1. transforms.NARROW 0 (the fold of the pair view into wq / wk allowed) against 16;
2. register block 1 (off) against 4, and a 128 x 4096 x 4096 projection at 2 to 32.

    PYTHONPATH=docs/measurements/meta_attention_epyc:bench .venv/bin/python \\
        docs/measurements/meta_attention_epyc/measure.py
"""

from __future__ import annotations

from llm import forward_ratio

from pimbuild import transforms


def show(label: str, recipe: str, block: int) -> None:
    r = forward_ratio("relu", None, block=block,
                      overrides=(f"model.recipe=meta:{recipe}", "model.size={}"))
    print(f"{label}: lowered {r['lowered_ms']:.1f} ms, eager {r['eager_ms']:.1f} ms, "
          f"ratio {r['ratio']:.2f}", flush=True)


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
