"""pimbuild on every Python it supports (not a test): for each interpreter found (pyenv's
versions, else ``python3.X`` on PATH) whose version ``requires-python`` admits, a fresh
virtual environment, ``pip install -e '.[test]'`` into it, then the quick tests
(``pytest -m "not slow"``) and the README's two smallest builds, one per target. Prints one
row per interpreter and writes them to ``--out`` (JSON).

    .venv/bin/python bench/pythons.py [--only 3.12,3.13] [--keep] [--out FILE]

Each venv lives under ``--root`` (a temporary folder unless given) and is removed after
unless ``--keep``. A failed step stops that interpreter, not the others; the script exits 1
if any interpreter failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILDS = [["model=gemv"], ["system=gpus", "model=mlp", "devices=[a100,l40s]"]]


def admitted() -> tuple[tuple[int, int], tuple[int, int]]:
    """The (major, minor) range ``requires-python`` gives: ``>=3.11,<3.14``."""
    spec = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    low = re.search(r">=\s*(\d+)\.(\d+)", spec)
    high = re.search(r"<\s*(\d+)\.(\d+)", spec)
    return ((int(low[1]), int(low[2])) if low else (3, 0),
            (int(high[1]), int(high[2])) if high else (4, 0))


def interpreters() -> dict[str, Path]:
    """``3.X`` -> an interpreter of that minor version: pyenv's, else one on PATH."""
    found: dict[str, Path] = {}
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for d in sorted(root.glob("3.*")) if root.is_dir() else []:
        m = re.fullmatch(r"(3\.\d+)\.\d+", d.name)
        if m and (d / "bin" / "python").exists():
            found[m[1]] = d / "bin" / "python"
    for minor in range(8, 20):
        exe = shutil.which(f"python3.{minor}")
        if exe:
            found.setdefault(f"3.{minor}", Path(exe))
    low, high = admitted()
    return {v: p for v, p in sorted(found.items(), key=lambda kv: int(kv[0].split(".")[1]))
            if low <= tuple(map(int, v.split("."))) < high}


def step(cmd: list[str], log: Path, timeout: int, **kw) -> tuple[bool, float, str]:
    """Run ``cmd`` with its output in ``log``; (ok, seconds, last line)."""
    start = time.perf_counter()
    with log.open("a") as f:
        f.write(f"$ {' '.join(cmd)}\n")
        f.flush()
        try:
            proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, timeout=timeout,
                                  cwd=REPO, **kw)
            ok = proc.returncode == 0
        except subprocess.TimeoutExpired:
            ok = False
    lines = [ln for ln in log.read_text().splitlines() if ln.strip()]
    return ok, time.perf_counter() - start, lines[-1] if lines else ""


def one(version: str, python: Path, root: Path) -> dict:
    venv = root / f"venv-{version}"
    log = root / f"log-{version}.txt"
    row: dict = {"python": version, "interpreter": str(python), "log": str(log)}
    exe = venv / "bin" / "python"
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    plan = [
        ("venv", [str(python), "-m", "venv", str(venv)], 300),
        ("install", [str(exe), "-m", "pip", "install", "--quiet", "-e", ".[test]"], 1800),
        ("quick tests", [str(exe), "-m", "pytest", "-q", "-m", "not slow",
                         "-p", "no:cacheprovider"], 3600),
        *[(f"build {' '.join(b)}", [str(venv / "bin" / "pimbuild"), *b,
                                    f"store={root / 'store' / version}",
                                    f"hydra.run.dir={root / 'runs' / version / str(i)}",
                                    "show_candidates=false",
                                    "platform.calibration_max_spread=0.5"], 1800)
          for i, b in enumerate(BUILDS)],
    ]
    for name, cmd, timeout in plan:
        ok, seconds, last = step(cmd, log, timeout, env=env)
        row[name] = {"ok": ok, "s": round(seconds, 1), "last": last[-160:]}
        print(f"  {version} {name}: {'ok' if ok else 'FAILED'} in {seconds:.0f} s  {last[-100:]}",
              flush=True)
        if not ok:
            break
    version_out = subprocess.run([str(exe), "-c", "import sys, torch, torch_mlir; print(sys."
                                  "version.split()[0], torch.__version__)"],
                                 capture_output=True, text=True) if exe.exists() else None
    row["versions"] = version_out.stdout.strip() if version_out else ""
    row["ok"] = all(v["ok"] for v in row.values() if isinstance(v, dict))
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated minor versions, e.g. 3.12,3.13")
    ap.add_argument("--root", type=Path, help="where the venvs go (default: a temp folder)")
    ap.add_argument("--keep", action="store_true", help="keep the venvs")
    ap.add_argument("--out", type=Path, default=REPO / "outputs" / "pythons.json")
    args = ap.parse_args()
    found = interpreters()
    if args.only:
        wanted = set(args.only.split(","))
        missing = wanted - set(found)
        if missing:
            sys.exit(f"error: no interpreter for {', '.join(sorted(missing))} (found "
                     f"{', '.join(found) or 'none'})")
        found = {v: p for v, p in found.items() if v in wanted}
    if not found:
        sys.exit("error: no interpreter that requires-python admits")
    root = args.root or Path(tempfile.mkdtemp(prefix="pimbuild-pythons-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"interpreters: {', '.join(f'{v} ({p})' for v, p in found.items())}; venvs in {root}")
    rows = [one(v, p, root) for v, p in found.items()]
    if not args.keep:
        for v in found:
            shutil.rmtree(root / f"venv-{v}", ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=2) + "\n")
    print("\n| python | torch | install s | quick tests | builds |\n|---|---|---:|---|---|")
    for r in rows:
        tests = r.get("quick tests", {})
        builds = [r.get(f"build {' '.join(b)}", {}) for b in BUILDS]
        print(f"| {r['python']} | {r['versions'].split(' ')[-1] if r['versions'] else '-'} | "
              f"{r.get('install', {}).get('s', '-')} | "
              f"{tests.get('last', 'not run') if tests else 'not run'} | "
              f"{'ok' if all(b.get('ok') for b in builds) else 'failed'} |")
    print(f"wrote {args.out}")
    sys.exit(0 if all(r["ok"] for r in rows) else 1)


if __name__ == "__main__":
    main()
