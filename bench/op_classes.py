"""Small models by class, none of them written for pimbuild: layers, op families, dtypes and
output kinds a user's model may hold, through both targets (not a test; about 15 minutes).

    .venv/bin/python bench/op_classes.py [--only gru,fft] [--no-gpus]

Each model is built with ``model.recipe=op_classes:<name>`` (this directory on PYTHONPATH)
through the PIM pipeline and through ``system=gpus devices=[a100,l40s]``. A row is the exit
status and the check against eager, or the one ``error:`` line; the models in ``REFUSED``
must be refused by class at ``lower`` (a complex tensor, control flow on values), every other
one must build and match eager. Writes outputs/bench/op_classes.md and exits 1 when a row
is not what it should be. The cases that found bugs are also tests (tests/odd_recipes.py,
tests/bad_recipes.py).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from hf_models import GPUS, build
from torch import nn

from pimbuild.recipes import Recipe


class _Fn(nn.Module):
    def __init__(self, f) -> None:
        super().__init__()
        self.f = f

    def forward(self, *args):
        return self.f(*args)


def _r(f, **inputs: torch.Tensor) -> Recipe:
    torch.manual_seed(0)
    return Recipe(f if isinstance(f, nn.Module) else _Fn(f), inputs)


class _Gru(nn.Module):
    def __init__(self, n: int, steps: int) -> None:
        super().__init__()
        self.cell, self.steps = nn.GRUCell(n, n), steps

    def forward(self, x):
        h = torch.zeros(1, x.shape[-1])
        for t in range(self.steps):
            h = self.cell(x[:, t], h)
        return h


def _branch(x):
    return x * 2 if x.sum() > 0 else x - 1


def _chain(x):
    for i in range(150):
        x = torch.tanh(x * 1.01 + 0.01 * i)
    return x


BUILDERS = {
    "embedding": lambda n: _r(nn.Sequential(nn.Embedding(100, n), nn.Linear(n, n)),
                              ids=torch.randint(0, 100, (4, 8))),
    "gru": lambda n: _r(nn.GRU(n, n, batch_first=True), x=torch.randn(1, 4, n)),
    "gru_cell_loop": lambda n: _r(_Gru(n, 20), x=torch.randn(1, 20, n)),
    "mha": lambda n: _r(nn.MultiheadAttention(n, 4, batch_first=True).eval(),
                        q=torch.randn(2, 10, n), k=torch.randn(2, 10, n),
                        v=torch.randn(2, 10, n)),
    "encoder_layer": lambda n: _r(nn.TransformerEncoderLayer(n, 4, 2 * n, batch_first=True),
                                  x=torch.randn(1, 8, n)),
    "conv_bn_pool": lambda n: _r(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1),
                                               nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2)),
                                 x=torch.randn(1, 3, n, n)),
    "conv_transpose": lambda n: _r(nn.ConvTranspose2d(4, 4, 3, stride=2),
                                   x=torch.randn(1, 4, n, n)),
    "depthwise_conv1d": lambda n: _r(nn.Conv1d(16, 16, 5, groups=16, padding=2),
                                     x=torch.randn(2, 16, n)),
    "batchnorm_train": lambda n: _r(nn.Sequential(nn.Linear(n, n), nn.BatchNorm1d(n)).train(),
                                    x=torch.randn(8, n)),
    "groupnorm": lambda n: _r(nn.GroupNorm(4, 16), x=torch.randn(2, 16, n, n)),
    "sdpa_causal": lambda n: _r(lambda q, k, v: F.scaled_dot_product_attention(
        q, k, v, is_causal=True), q=torch.randn(1, 2, n, 16), k=torch.randn(1, 2, n, 16),
        v=torch.randn(1, 2, n, 16)),
    "pixel_shuffle": lambda n: _r(lambda x: F.interpolate(F.pixel_shuffle(x, 2),
                                                          scale_factor=2, mode="nearest"),
                                  x=torch.randn(1, 8, n, n)),
    "activations": lambda n: _r(lambda x: F.mish(F.softplus(F.hardswish(F.silu(
        x.clamp(-3, 3))))), x=torch.randn(n, n)),
    "chain_150": lambda n: _r(_chain, x=torch.randn(n)),
    "cumsum_sort": lambda n: _r(lambda x: (torch.cumsum(x, 1), torch.sort(x, dim=1).values),
                                x=torch.randn(4, n)),
    "argsort_gather": lambda n: _r(lambda x: torch.gather(x, 1, torch.argsort(x, 1)),
                                   x=torch.randn(4, n)),
    "topk_argmax": lambda n: _r(lambda x: (x.argmax(-1), torch.topk(x, 3).values),
                                x=torch.randn(4, n)),
    "nll_loss": lambda n: _r(lambda x, t: F.nll_loss(F.log_softmax(x, -1), t),
                             x=torch.randn(8, n), t=torch.randint(0, n, (8,))),
    "integer_ops": lambda n: _r(lambda a, b: ((a // 3) % 5 + (a & b), a.float() / 7),
                                a=torch.randint(0, 100, (n,)), b=torch.randint(0, 100, (n,))),
    "bool_mask_input": lambda n: _r(lambda m, x: torch.where(m, x, -x),
                                    m=torch.rand(n) > 0.5, x=torch.randn(n)),
    "float16_input": lambda n: _r(lambda x: x * 2 + 1, x=torch.randn(n).half()),
    "float64_module": lambda n: _r(nn.Linear(n, n).double(), x=torch.randn(2, n).double()),
    "zero_size": lambda n: _r(lambda x: x + 1, x=torch.randn(0, n)),
    "one_element": lambda n: _r(lambda x: torch.exp(x) * 2, x=torch.randn(1)),
    "scalar_output": lambda n: _r(lambda x: (x * x).sum(), x=torch.randn(n, n)),
    "view_outputs": lambda n: _r(lambda x: (torch.relu(x).t(), *torch.relu(x).chunk(2, 1)),
                                 x=torch.randn(8, n)),
    "constant_outputs": lambda n: _r(lambda x: (x + 1, torch.ones(3, 3),
                                                torch.arange(6.0).reshape(2, 3)),
                                     x=torch.randn(n)),
    "unused_input": lambda n: _r(lambda x, y: x * 2, x=torch.randn(n), y=torch.randn(n)),
    "big_constant": lambda n: _r(lambda x: x + torch.arange(1 << 20, dtype=torch.float32),
                                 x=torch.randn(1 << 20)),
    "fft": lambda n: _r(lambda x: torch.fft.rfft(x).abs(), x=torch.randn(4, n)),
    "complex_input": lambda n: _r(lambda x: x.abs(), x=torch.randn(n, dtype=torch.complex64)),
    "branch_on_values": lambda n: _r(_branch, x=torch.randn(n)),
}
REFUSED = {"fft": "complex64", "complex_input": "complex64",
           "branch_on_values": "control flow depends on a tensor's values"}
N = 16  # model.size.n of every build


def _make(name: str):
    def builder(n: int = N) -> Recipe:
        return BUILDERS[name](n)
    builder.__name__ = name
    return builder


globals().update({name: _make(name) for name in BUILDERS})  # op_classes:<name> recipes


def verdict(row: dict) -> str:
    text = " ".join(row["lines"])
    if row["model"] in REFUSED:
        return "refused, as it should be" if row["rc"] == 1 and REFUSED[row["model"]] in text \
            else "NOT REFUSED AS EXPECTED"
    return "built, matches eager" if row["rc"] == 0 and "matches eager" in text else "FAILED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--no-gpus", action="store_true", help="only the PIM target")
    parser.add_argument("--store", type=Path, default=Path("outputs/artifacts"))
    parser.add_argument("--out", type=Path, default=Path("outputs/bench"))
    args = parser.parse_args()
    names = [m for m in args.only.split(",") if m] or list(BUILDERS)
    unknown = [m for m in names if m not in BUILDERS]
    if unknown:
        sys.exit(f"error: no model {', '.join(unknown)}: choose from {', '.join(BUILDERS)}")
    rows = []
    for name in names:
        for extra in [[]] + ([] if args.no_gpus else [GPUS]):
            tag = "gpus" if extra else "pim"
            row = build(name, N, extra, args.store.resolve(),
                        (args.out / "op_class_runs" / f"{name}-{tag}").resolve(), "op_classes")
            rows.append(row | {"verdict": verdict(row)})
            print(f"{name} ({tag}): rc {row['rc']}, {row['seconds']:.0f} s, "
                  f"{rows[-1]['verdict']}", flush=True)
    lines = ["# bench/op_classes.py", "", f"torch {torch.__version__}.", "",
             "| model | target | verdict | rc | s | check or error |",
             "|---|---|---|---:|---:|---|"]
    for r in rows:
        said = next((x for x in r["lines"]
                     if x.startswith(("error:", "partitioned", "agree"))), "")
        lines.append(f"| {r['model']} | {r['target']} | {r['verdict']} | {r['rc']} | "
                     f"{r['seconds']:.0f} | {said.replace('|', '/')} |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "op_classes.md").write_text("\n".join(lines) + "\n")
    bad = [r for r in rows if r["verdict"] in ("FAILED", "NOT REFUSED AS EXPECTED")]
    print(f"{len(rows) - len(bad)}/{len(rows)} as expected; table: {args.out / 'op_classes.md'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
