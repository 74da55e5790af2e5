"""Benchmark (not a test): one host code generation switch, off against on, in one process.

    .venv/bin/python bench/codegen_ab.py vectile.PACK model=matmul [override ...]
        [--rounds 40] [--block 4]

The model (Hydra overrides as ``pimbuild`` takes them) is lowered once; its ``scf.mlir`` is
compiled twice, with the module attribute named (``<module of pimbuild>.<NAME>``, a bool) set
to False (old) and True (new), each called with its arguments and output buffers prepared
once, so the times are the compiled code's own. Old, new (in alternating order) and PyTorch
eager run once per round on one thread; the medians of all rounds but the first two, their
ratios, and the largest relative difference of each program's outputs from eager's.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_module

from pimbuild import frontend
from pimbuild.codegen import jit
from pimbuild.commands.cli import CONFIG_MODULE
from pimbuild.frontend import lower, mlir
from pimbuild.targets.offload.profile import reuse_freed_memory


def compiled(scf: Path, module, name: str, value: bool, block: int, tmp: Path):
    """The ExecutionEngine of ``scf`` compiled with ``module.name = value``; what code
    generation did."""
    before = getattr(module, name)
    setattr(module, name, value)
    try:
        ir_module = mlir.parse_file(scf)
        done = jit.to_llvm(ir_module, block, stage="jit", failure_dir=tmp / "failure")
        return jit.engine_of(ir_module), done
    finally:
        setattr(module, name, before)


def prepared(engine, signature: dict, args: list[np.ndarray]):
    """A call of the forward on fixed descriptors, and the output buffers it writes."""
    return jit.prepare(engine, signature["function"], args, signature["outputs"])


def error(outputs: list[np.ndarray], reference) -> float:
    reference = reference if isinstance(reference, (tuple, list)) else [reference]
    return max(float(np.max(np.abs(o - r.detach().numpy()))
                     / (np.max(np.abs(r.detach().numpy())) + 1e-30))
               for o, r in zip(outputs, reference, strict=True))


def switch_module(switch: str):
    """The pimbuild module ``switch`` (``module.NAME``) names, which must hold a bool NAME;
    else one ``error:`` line and exit status 1."""
    module_name, _, name = switch.rpartition(".")
    try:
        module = importlib.import_module(f"pimbuild.{module_name}")
    except ImportError:
        sys.exit(f"error: no module pimbuild.{module_name} (the switch is module.NAME, "
                 "e.g. vectile.PACK)")
    if not isinstance(getattr(module, name, None), bool):
        sys.exit(f"error: pimbuild.{module_name} has no bool {name!r} to switch")
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("switch", help="module.NAME under pimbuild, e.g. vectile.PACK")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--block", type=int, default=4, help="lowering.register_block")
    args = parser.parse_args()
    module = switch_module(args.switch)
    name = args.switch.rsplit(".", 1)[1]
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        cfg = compose("config", overrides=args.overrides)
    p = lower.params(cfg)
    torch.set_num_threads(1)
    reuse_freed_memory()  # all three in the steady state the profile stage times
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        lower.lower(p, out, out / "failure")
        signature = json.loads((out / "signature.json").read_text())
        inputs, _ = frontend.materialize(p.model, signature)
        calls, done = {}, {}
        for label, value in (("old", False), ("new", True)):
            engine, done[label] = compiled(out / "scf.mlir", module, name, value,
                                           args.block, out)
            calls[label] = prepared(engine, signature, inputs)
        recipe = frontend.build_recipe(p.model)
        with torch.no_grad():
            reference = recipe.module(*recipe.inputs.values())
            times: dict[str, list[float]] = {"old": [], "new": [], "eager": []}
            for r in range(args.rounds):
                for label in ("old", "new") if r % 2 == 0 else ("new", "old"):
                    t = time.perf_counter()
                    calls[label][0]()
                    times[label].append(time.perf_counter() - t)
                t = time.perf_counter()
                recipe.module(*recipe.inputs.values())
                times["eager"].append(time.perf_counter() - t)
    ms = {k: float(np.median(v[2:])) * 1e3 for k, v in times.items()}
    print(json.dumps({
        "model": p.model.name, "switch": args.switch, "overrides": args.overrides,
        "codegen": done, "ms": ms, "old/eager": ms["old"] / ms["eager"],
        "new/eager": ms["new"] / ms["eager"], "new/old": ms["new"] / ms["old"],
        "error": {k: error(calls[k][1], reference) for k in calls}}))


if __name__ == "__main__":
    main()
