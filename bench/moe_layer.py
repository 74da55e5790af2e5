"""A mixture-of-experts layer's experts as the engine simulation times them (``Steps.fused``:
one fused kernel, timed as GEMMs of the same work), against measured fused-MoE kernels (not
a test; nothing is fitted to these rows).

- **AIConfigurator** (PyPI ``aiconfigurator-core``, Apache-2.0): vLLM's fused MoE kernel in
  bf16, one GPU (``moe_tp_size = moe_ep_size = 1``), on every catalogue GPU it measured, at
  its routing distributions (``balanced``; ``power_law_S`` timed as ``zipf:S``).
- **LLMServingSim** (github ``casys-kaist/LLMServingSim``, MIT): vLLM's ``FusedMoE`` block of
  Qwen3-30B-A3B on the RTX PRO 6000 with routing forced to spread ``tokens`` evenly over
  ``activated_experts`` (``profiler/perf/RTXPRO6000/.../tp1/moe.csv``). Also timed the way
  the simulation first did, a gated MLP per expert (``Steps.expert``) summed.

    .venv/bin/python bench/moe_layer.py AIC_WHEEL LLMSERVINGSIM [--out outputs/bench]

Writes ``moe_layer.json``.
"""

from __future__ import annotations

import argparse
import csv
import io
import statistics
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import write_json  # noqa: E402

from pimbuild.targets.gpus.enginesim.routing import Routing  # noqa: E402
from pimbuild.targets.gpus.enginesim.shape import LlmShape  # noqa: E402
from pimbuild.targets.gpus.enginesim.steps import Steps  # noqa: E402
from pimbuild.targets.gpus.kerneltime import clock  # noqa: E402
from pimbuild.targets.gpus.kerneltime.sources import AIC_ROOT, Repo  # noqa: E402

CATALOGUE = {"a100_sxm": "a100", "l40s": "l40s", "h100_sxm": "h100", "h200_sxm": "h200",
             "b200_sxm": "b200", "rtx_pro_6000_server": "rtxpro6000"}
QWEN_MOE = "profiler/perf/RTXPRO6000/Qwen/Qwen3-30B-A3B-Instruct-2507/bf16/tp1/moe.csv"


def moe(hidden: int, inter: int, topk: int, experts: int) -> LlmShape:
    """A model holding only what the experts' timing reads."""
    return LlmShape("moe", 1, hidden, 1, 1, 1, inter, 1, experts=experts, top_k=topk)


def pattern(distribution: str) -> str:
    return "balanced" if distribution == "balanced" else \
        "zipf:" + distribution.removeprefix("power_law_")


def stats(errors: list[float]) -> dict[str, float]:
    a = [abs(e) for e in errors]
    return {"shapes": len(errors), "median_abs_error": statistics.median(a),
            "mean_abs_error": statistics.fmean(a), "mean_signed_error": statistics.fmean(errors)}


def aiconfigurator(wheel: Path) -> dict:
    import pandas as pd

    out, z = {}, zipfile.ZipFile(wheel)
    for gpu, name in CATALOGUE.items():
        files = sorted(n for n in z.namelist() if n.startswith(f"{AIC_ROOT}/{gpu}/moe/vllm/")
                       and n.endswith("moe_perf.parquet"))
        if not files:
            continue
        df = pd.read_parquet(io.BytesIO(z.read(files[-1])))  # the newest vLLM's
        df = df[(df.moe_tp_size == 1) & (df.moe_ep_size == 1) & (df.moe_dtype == "bfloat16")]
        kernels, _ = clock.clock(name)
        errors = []
        for r in df.itertuples():
            m = moe(r.hidden_size, r.inter_size, r.topk, r.num_experts)
            counts = Routing(pattern(r.distribution), m.experts, m.top_k).counts(r.num_tokens)
            ours = Steps(m, kernels.seconds).fused(counts) * 1e3
            errors.append(ours / r.latency - 1)
        out[name] = {"file": files[-1].removeprefix(AIC_ROOT + "/"), **stats(errors)}
        print(f"AIConfigurator {name}: {len(errors)} shapes, median |error| "
              f"{out[name]['median_abs_error']:.0%}, mean signed "
              f"{out[name]['mean_signed_error']:+.0%}")
    return out


def llmservingsim(repo: Repo) -> dict:
    m = moe(2048, 768, 8, 128)  # Qwen3-30B-A3B's experts
    kernels, _ = clock.clock("rtxpro6000")
    steps = Steps(m, kernels.seconds)
    fused, per_expert = [], []
    for r in csv.DictReader(io.StringIO(repo.read(QWEN_MOE) or "")):
        t, a, us = int(r["tokens"]), int(r["activated_experts"]), float(r["time_us"])
        pairs = t * m.top_k
        rows = [pairs // a + (e < pairs % a) for e in range(a)]
        fused.append(steps.fused(tuple(rows)) * 1e6 / us - 1)
        per_expert.append(sum(steps.expert(n, m.ffn) for n in rows) * 1e6 / us - 1)
    out = {"fused": stats(fused), "per_expert_sum": stats(per_expert)}
    print(f"LLMServingSim RTX PRO 6000, Qwen3-30B-A3B: {len(fused)} shapes; fused: median "
          f"|error| {out['fused']['median_abs_error']:.0%}, mean signed "
          f"{out['fused']['mean_signed_error']:+.0%}; a gated MLP per expert: median |error| "
          f"{out['per_expert_sum']['median_abs_error']:.0%}, mean signed "
          f"{out['per_expert_sum']['mean_signed_error']:+.0%}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("wheel", type=Path, help="aiconfigurator-core's wheel")
    ap.add_argument("llmservingsim", type=Path)
    ap.add_argument("--out", type=Path, default=Path("outputs/bench"))
    args = ap.parse_args()
    write_json(args.out / "moe_layer.json",
               {"aiconfigurator": aiconfigurator(args.wheel),
                "llmservingsim": llmservingsim(Repo(args.llmservingsim))})


if __name__ == "__main__":
    main()
