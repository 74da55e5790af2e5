"""Check that a code change keeps pimbuild's artifacts and conclusions (not a test: it builds
19 PIM models and 3 GPU workloads, about eight minutes cold).

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

The GPU workloads (``GPUS``, named ``gpus:<name>``) need no seeding: their kernel times come
from the fitted model, not from timing. Both modes run them through the command line, keep
every stage's files, and ``check`` asserts every file byte-identical except the completion
markers and the report's wall-clock times (``WALL`` keys of the JSON, solve and wall times of
the markdown), which are compared without them.
"""

from __future__ import annotations

import argparse
import json
import re
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
SEEDED = ("calibrate", "profile", "eager")  # measured; in pipeline order (profile reads calibrate)
EQUAL_JSON = {"decide": "decisions.json", "reinsert": "reinsert.json",
              "simulate": "report.json"}
# system=gpus workloads: name -> overrides
GPUS = {"llama3_8b_a100_l40s": ["model=llama3_8b", "devices=[a100,l40s]"],
        "mmdit_h100_l40s_latency": ["model=mmdit", "devices=[h100,l40s]", "gpus.planner=latency"],
        "gptj6b_h100_a100": ["model=gptj6b", "devices=[h100,a100]"]}
WALL = {"solve_s", "wall_s", "simulated_per_wall", "solve s"}
FAST = ["show_candidates=false", "profile.repetitions=3", "profile.warmup=1",
        "platform.calibration_mib=64"]


def _run_gpus(name: str, ref: Path, out: Path) -> dict[str, Path]:
    """Build GPU workload ``name`` through the command line; its stage folders."""
    exe = Path(sys.executable).parent / "pimbuild"
    run_dir = out / "runs" / name
    proc = subprocess.run([str(exe), "system=gpus", *GPUS[name], f"store={out / 'store'}",
                           f"hydra.run.dir={run_dir}", "show_candidates=false"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"gpus:{name}: pimbuild failed\n{proc.stdout}\n{proc.stderr}")
    stages = json.loads((run_dir / "manifest.json").read_text())["stages"]
    return {s: Path(v["dir"]) for s, v in stages.items()}


def _unwalled(x: object) -> object:
    if isinstance(x, dict):
        return {k: _unwalled(v) for k, v in x.items() if k not in WALL}
    if isinstance(x, list):
        return [_unwalled(v) for v in x]
    return x


def _unwalled_md(text: str) -> str:
    """A report without its wall-clock numbers: solve times, and the lines and table columns
    that give the simulator's wall time."""
    text = re.sub(r"(?i)solve(?: time)? [0-9.e+-]+ ?s", "solve time", text)
    out, walled = [], []
    for line in text.splitlines():
        cells = line.split("|")
        if not line.startswith("|"):
            walled = []
        elif any("wall" in c.lower() for c in cells):  # a table's header: drop those columns
            walled = [i for i, c in enumerate(cells) if "wall" in c.lower()]
        if walled and line.startswith("|"):
            line = "|".join(c for i, c in enumerate(cells) if i not in walled)
        elif "wall" in line.lower():
            continue
        out.append(line)
    return "\n".join(out)


def _same_file(new: Path, old: Path) -> bool:
    if new.suffix == ".json":
        return _unwalled(json.loads(new.read_text())) == _unwalled(json.loads(old.read_text()))
    if new.suffix == ".md":  # the report's wall-clock times
        return _unwalled_md(new.read_text()) == _unwalled_md(old.read_text())
    return new.read_bytes() == old.read_bytes()


def record_gpus(ref: Path, names: list[str]) -> None:
    for name in names:
        for stage, folder in _run_gpus(name, ref, ref).items():
            shutil.copytree(folder, ref / f"gpus:{name}" / stage, dirs_exist_ok=True)
        print(f"gpus:{name}: recorded", flush=True)


def check_gpus(ref: Path, names: list[str]) -> int:
    failures = 0
    work = Path(tempfile.mkdtemp(prefix="pimbuild-equivalence-"))
    for name in names:
        stages = _run_gpus(name, ref, work)
        old_dir = ref / f"gpus:{name}"
        problems = [f"stage {s} missing" for s in sorted({p.name for p in old_dir.iterdir()}
                                                          - set(stages))]
        for stage, folder in stages.items():
            old = {p.name for p in (old_dir / stage).iterdir() if p.name != ".complete"} \
                if (old_dir / stage).is_dir() else set()
            new = {p.name for p in folder.iterdir() if p.name != ".complete"}
            problems += [f"{stage}/{n} added or removed" for n in sorted(old ^ new)]
            problems += [f"{stage}/{n} differs" for n in sorted(old & new)
                         if not _same_file(folder / n, old_dir / stage / n)]
        failures += bool(problems)
        print(f"gpus:{name}: {'; '.join(problems) or 'identical'}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return 1 if failures else 0


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


def _with_stages(cfg, stages: list[str]):
    """``cfg`` building ``stages`` (the key was ``targets`` before it was ``stages``, so that
    the script also runs on the code it records)."""
    from omegaconf import open_dict

    out = cfg.copy()
    with open_dict(out):
        out["stages" if "stages" in cfg else "targets"] = stages
    return out


def _seed(cfg, store, stage: str, recorded: Path, work: Path, plan, build) -> None:
    """Put the recorded ``stage`` artifact in the store under the key the current code gives
    it: build what it reads first, then copy it and record those inputs as the ones it was
    built from (else the store would call it stale and measure again)."""
    task = next((t for t in plan(cfg, store, work / "failure") if t.stage == stage), None)
    if task is None or task.artifact.complete:
        return
    if task.reads:
        build(_with_stages(cfg, sorted({a.stage for a in task.reads})),
              work / "runs" / f"seed-{stage}")
    shutil.copytree(recorded, task.artifact.dir)
    marker = json.loads(task.artifact.marker.read_text())
    marker["inputs"] = {a.stage: a.digest() for a in task.reads}
    task.artifact.marker.write_text(json.dumps(marker))


def check(ref: Path, models: list[str], lowering_only: bool = False) -> int:
    from hydra import compose, initialize_config_module

    from pimbuild.build.config import register_configs
    from pimbuild.build.driver import build
    from pimbuild.build.graph import plan
    from pimbuild.core.artifacts import Store
    from pimbuild.core.console import console

    register_configs()
    failures = 0
    work = Path(tempfile.mkdtemp(prefix="pimbuild-equivalence-"))
    for model in models:
        with initialize_config_module("pimbuild.conf", version_base="1.3"):
            cfg = compose("config", overrides=[f"model={model}", f"store={work / 'store'}",
                                               *FAST])
        if lowering_only:
            cfg = _with_stages(cfg, ["extract"])
        store = Store(work / "store")
        console.quiet = True
        try:
            if not lowering_only:
                for stage in SEEDED:
                    _seed(cfg, store, stage, ref / model / stage, work, plan, build)
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
    parser.add_argument("models", nargs="*",
                        default=[*MODELS, *(f"gpus:{n}" for n in GPUS)],
                        help="PIM model names and gpus:<workload> names (default: all)")
    parser.add_argument("--lowering", action="store_true",
                        help="check: compare lower and extract only (PIM models)")
    args = parser.parse_args()
    ref = args.ref.resolve()
    pim = [m for m in args.models if not m.startswith("gpus:")]
    gpus = [m.removeprefix("gpus:") for m in args.models if m.startswith("gpus:")]
    unknown = [g for g in gpus if g not in GPUS]
    if unknown:
        sys.exit(f"error: unknown GPU workload(s) {unknown}; known: {sorted(GPUS)}")
    if args.mode == "record":
        record(ref, pim)
        record_gpus(ref, gpus)
    else:
        failed = check(ref, pim, args.lowering) if pim else 0
        failed |= check_gpus(ref, [] if args.lowering else gpus)
        sys.exit(failed)


if __name__ == "__main__":
    main()
