"""Benchmark (not a test): does calibrate's search pick a register-blocking factor that runs
the decode layers best on this host? (issue 13 item 8)

    .venv/bin/python bench/register_blocks.py [--blocks 2,4,8,16,32] [--rounds 15]
        [--models llama7b,gptj6b] [--json outputs/bench/register_blocks.json]

Each layer is lowered once and its ``scf.mlir`` compiled at every factor (no markers); every
round runs each compiled forward once, in an order that rotates by one each round, then the
layer in PyTorch eager, on one thread with freed memory reused as the profile stage times.
Per factor: the median forward and the median of the rounds' own ratios to eager, with their
quartiles (the first round is not timed). Then calibrate's search (``search_register_block``,
its two-layer MLP of ``platform.calibration_mib``) times the same factors, and the table says
what its choice costs each layer against the factor that ran it fastest. Compare factors
within one run: they share its load.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from common import write_json
from hydra import compose, initialize_config_module
from hydra.errors import MissingConfigException
from rich.table import Table

from pimbuild import frontend
from pimbuild.codegen import jit
from pimbuild.commands.cli import CONFIG_MODULE
from pimbuild.core.console import console
from pimbuild.frontend import lower
from pimbuild.targets.offload import calibrate
from pimbuild.targets.offload.profile import host_cpu, reuse_freed_memory


def config(overrides: list[str]):
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        return compose("config", overrides=overrides)


def factors_against_eager(cfg, blocks: list[int], rounds: int) -> dict:
    """The model ``cfg`` names compiled at each of ``blocks``, all timed alternately with
    eager."""
    p = lower.params(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        lower.lower(p, work, work / "failure")
        signature = json.loads((work / "signature.json").read_text())
        engines = {b: jit.compile_scf(work / "scf.mlir", work / "failure", b) for b in blocks}
    args, _ = frontend.materialize(p.model, signature)
    recipe = frontend.materialized_recipe(p.model, signature)
    calls = {b: jit.prepare(e, signature["function"], args, signature["outputs"])[0]
             for b, e in engines.items()}
    inputs = list(recipe.inputs.values())
    times: dict = {b: [] for b in [*blocks, "eager"]}
    with torch.no_grad():
        for r in range(rounds + 1):
            for b in blocks[r % len(blocks):] + blocks[:r % len(blocks)]:
                start = time.perf_counter()
                calls[b]()
                times[b].append(time.perf_counter() - start)
            with frontend.kept_buffers(recipe.module):
                start = time.perf_counter()
                recipe.module(*inputs)
                times["eager"].append(time.perf_counter() - start)
    eager = np.array(times["eager"][1:])
    rows = {}
    for b in blocks:
        lowered = np.array(times[b][1:])
        q25, q50, q75 = np.percentile(lowered / eager, [25, 50, 75])
        rows[b] = {"median_ms": float(np.median(lowered)) * 1e3, "ratio": float(q50),
                   "ratio_p25": float(q25), "ratio_p75": float(q75)}
    return {"eager_ms": float(np.median(eager)) * 1e3, "blocks": rows}


def positive_ints(text: str) -> list[int]:
    """``--blocks``: comma-separated factors, each at least 1."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not comma-separated integers: {text!r}") from None
    if min(values) < 1:
        raise argparse.ArgumentTypeError(f"a factor is at least 1: {text!r}")
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--blocks", type=positive_ints, default=[2, 4, 8, 16, 32])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--models", default="llama7b,gptj6b")
    parser.add_argument("--json", type=Path, default=Path("outputs/bench/register_blocks.json"))
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds: at least 1")
    blocks = args.blocks
    configs = {}
    for model in args.models.split(","):
        try:
            configs[model] = config([f"model={model}"])
        except MissingConfigException:
            parser.error(f"--models: no model config {model!r}")
    cpu = host_cpu()
    reuse_freed_memory()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        layers = {m: factors_against_eager(cfg, blocks, args.rounds)
                  for m, cfg in configs.items()}
    finally:
        torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        search = calibrate.search_register_block(
            tuple(blocks), next(iter(configs.values())).platform.calibration_mib, Path(tmp))
    chosen = search["value"]
    table = Table(title=f"decode layers at each register-blocking factor ({cpu})")
    for col in ("model", "factor", "lowered ms", "ratio to eager", "quartiles", "search ms"):
        table.add_column(col, justify="right")
    for model, layer in layers.items():
        for b, r in layer["blocks"].items():
            mark = " (chosen)" if b == chosen else ""
            table.add_row(model, f"{b}{mark}", f"{r['median_ms']:.2f}", f"{r['ratio']:.3f}",
                          f"{r['ratio_p25']:.3f}-{r['ratio_p75']:.3f}",
                          f"{search['best_s'][str(b)] * 1e3:.2f}")
    console.print(table)
    for model, layer in layers.items():
        best = min(layer["blocks"], key=lambda b: layer["blocks"][b]["ratio"])
        cost = layer["blocks"][chosen]["ratio"] / layer["blocks"][best]["ratio"] - 1
        layer["fastest"], layer["search_cost"] = best, cost
        console.print(f"{model}: fastest at {best}; the search's {chosen} runs it "
                      f"{cost:+.1%} against that (eager {layer['eager_ms']:.1f} ms)")
    write_json(args.json, {"cpu": cpu, "blocks": blocks, "rounds": args.rounds,
                           "layers": layers, "search": search})


if __name__ == "__main__":
    main()
