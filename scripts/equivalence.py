"""Check that a code change keeps pimbuild's artifacts and conclusions (not a test: it builds
19 models, about six minutes cold).

    python scripts/equivalence.py record REF_DIR [model ...]   # with the code before the change
    python scripts/equivalence.py check REF_DIR [model ...]    # with the code after it
    python scripts/equivalence.py check --lowering REF_DIR     # lower and extract only

``record`` runs ``pimbuild model=<m>`` for every model through the command line (so it works
with any version that writes ``manifest.json``) and keeps, per model, the lower and extract
files, the profile and calibrate artifacts, and ``decisions.json``, ``reinsert.json`` and
``report.json``. ``check`` builds each model with the current code, but seeds its store with
the recorded profile and calibrate artifacts (under the keys the current code gives them),
so decide, reinsert and simulate are fed the same measurements; it then asserts that lower
and extract are byte-identical and that decisions, the hybrid check and the report are equal.
``--lowering`` compares lower and extract only (for a change that alters what profile
writes, so that recorded profiles can no longer be fed to the new code).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

MODELS = ["ew_add", "copying", "scale", "zeroing", "relu", "silu", "gelu", "tanh", "softmax",
          "layernorm", "rmsnorm", "mac", "gemv", "matmul", "depthwise_conv", "attention", "mlp",
          "llama7b", "gptj6b"]
BYTE_IDENTICAL = {"lower": ("torch.mlir", "linalg.mlir", "scf.mlir", "signature.json"),
                  "extract": ("candidates.json",)}
SEEDED = ("profile", "calibrate")
EQUAL_JSON = {"decide": "decisions.json", "reinsert": "reinsert.json",
              "simulate": "report.json"}
FAST = ["show_candidates=false", "profile.repetitions=3", "profile.warmup=1",
        "platform.calibration_mib=64"]


def record(ref: Path, models: list[str]) -> None:
    exe = Path(sys.executable).parent / "pimbuild"
    store = ref / "store"
    for model in models:
        run_dir = ref / "runs" / model
        proc = subprocess.run([str(exe), f"model={model}", f"store={store}",
                               f"hydra.run.dir={run_dir}", *FAST],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"{model}: pimbuild failed\n{proc.stdout}\n{proc.stderr}")
        stages = json.loads((run_dir / "manifest.json").read_text())["stages"]
        for stage in [*BYTE_IDENTICAL, *SEEDED, *EQUAL_JSON]:
            shutil.copytree(stages[stage]["dir"], ref / model / stage, dirs_exist_ok=True)
        print(f"{model}: recorded", flush=True)


def check(ref: Path, models: list[str], lowering_only: bool = False) -> int:
    from hydra import compose, initialize_config_module

    from pimbuild.artifacts import Store
    from pimbuild.build import build
    from pimbuild.config import register_configs
    from pimbuild.console import console
    from pimbuild.tasks import plan

    register_configs()
    failures = 0
    work = Path(tempfile.mkdtemp(prefix="pimbuild-equivalence-"))
    for model in models:
        with initialize_config_module("pimbuild.conf", version_base="1.3"):
            cfg = compose("config", overrides=[f"model={model}", f"store={work / 'store'}",
                                               *FAST, *(["targets=[extract]"]
                                                        if lowering_only else [])])
        store = Store(work / "store")
        for task in plan(cfg, store, work / "failure"):
            if task.stage in SEEDED and not task.artifact.complete:
                shutil.copytree(ref / model / task.stage, task.artifact.dir)
        console.quiet = True
        try:
            result = build(cfg, work / "runs" / model)
        finally:
            console.quiet = False
        stages = {s: Path(v["dir"]) for s, v in result.manifest["stages"].items()}
        problems = []
        for stage, names in BYTE_IDENTICAL.items():
            problems += [f"{stage}/{n} differs" for n in names
                         if (stages[stage] / n).read_bytes()
                         != (ref / model / stage / n).read_bytes()]
        for stage, name in {} if lowering_only else EQUAL_JSON.items():
            new = json.loads((stages[stage] / name).read_text())
            old = json.loads((ref / model / stage / name).read_text())
            if new != old:
                keys = sorted(k for k in {*new, *old} if new.get(k) != old.get(k))
                problems.append(f"{stage}/{name} differs in {keys}")
        failures += bool(problems)
        print(f"{model}: {'; '.join(problems) or 'identical'}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=["record", "check"])
    parser.add_argument("ref", type=Path)
    parser.add_argument("models", nargs="*", default=MODELS)
    parser.add_argument("--lowering", action="store_true",
                        help="check: compare lower and extract only")
    args = parser.parse_args()
    if args.mode == "record":
        record(args.ref.resolve(), args.models)
    else:
        sys.exit(check(args.ref.resolve(), args.models, args.lowering))


if __name__ == "__main__":
    main()
