"""The store is the truth: damaged artifacts are rebuilt, never used; doit's database is a
cache; dead builds leave nothing behind; concurrent builds build once (docs/design.md §2)."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest

from pimbuild.build.graph import stage_module
from pimbuild.core.artifacts import Store
from tests.conftest import REPO, artifact_dir, run_cli

SMALL = ["model=relu", "model.size.n=4096", "profile.backend=timer", "profile.repetitions=3",
         "platform.calibration_mib=16", "platform.calibration_max_spread=0.5"]
ALL = ["lower", "extract", "runtime", "calibrate", "instrument", "profile", "eager",
       "decide", "reinsert", "simulate"]


def _report(result) -> dict:
    return json.loads((artifact_dir(result, "simulate") / "report.json").read_text())


@pytest.mark.slow
def test_edited_artifact_is_rebuilt_not_used(run_build) -> None:
    first = run_build(SMALL)
    candidates = artifact_dir(first, "extract") / "candidates.json"
    data = json.loads(candidates.read_text())
    data["candidates"][0]["n_iter"] *= 2
    candidates.write_text(json.dumps(data, indent=2) + "\n")
    second = run_build(SMALL)
    assert second.repaired == {"extract": "candidates.json was modified"}
    assert second.executed == ["extract"]
    assert json.loads(candidates.read_text())["candidates"][0]["n_iter"] == 4096
    assert second.manifest == first.manifest
    assert _report(second) == _report(first)


@pytest.mark.slow
@pytest.mark.parametrize(("stage", "name"), [("lower", "scf.mlir"),
                                             ("extract", "candidates.json"),
                                             ("profile", "timing.csv"),
                                             ("decide", "decisions.json")])
def test_deleted_file_is_repaired(run_build, stage: str, name: str) -> None:
    first = run_build(SMALL)
    (artifact_dir(first, stage) / name).unlink()
    second = run_build(SMALL)
    assert second.repaired[stage] == f"{name} is missing"
    if stage != "profile":  # deterministic: the same content again, nothing downstream moves
        assert second.executed == [stage]
        assert second.manifest["stages"] == first.manifest["stages"]
        return
    # A new measurement: a stage is rebuilt exactly when an artifact it reads has new content.
    before, after = ({s: v["files"] for s, v in run.manifest["stages"].items()}
                     for run in (first, second))
    for s in ALL[ALL.index("decide"):]:
        changed = [r for r in stage_module(s, "pim").READS if before[r] != after[r]]
        assert (s in second.executed) == bool(changed), (s, changed)
        if changed:
            assert second.repaired[s] == f"its input {changed[0]} changed since it was built"


@pytest.mark.slow
def test_same_size_same_time_edit_is_caught_with_verify(run_build) -> None:
    first = run_build(SMALL)
    scf = artifact_dir(first, "lower") / "scf.mlir"
    st = scf.stat()
    text = scf.read_text()
    scf.write_text(text.replace("ugt", "ult", 1))
    os.utime(scf, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert run_build(SMALL).executed == []  # the fast check trusts size + time
    again = run_build([*SMALL, "verify=true"])
    assert again.repaired == {"lower": "scf.mlir was modified"}
    assert scf.read_text() == text


@pytest.mark.slow
def test_folder_without_marker_is_rebuilt(run_build, store: Path) -> None:
    first = run_build(SMALL)
    (artifact_dir(first, "instrument") / ".complete").unlink()
    second = run_build(SMALL)
    assert second.repaired == {"instrument": "no completion marker"}


@pytest.mark.slow
def test_deleted_or_copied_doit_database_misreports_nothing(run_build, store: Path,
                                                           tmp_path: Path) -> None:
    run_build(SMALL)
    (store / ".doit.sqlite3").unlink()
    again = run_build(SMALL)
    assert again.executed == [] and again.cached == ALL
    moved = tmp_path / "moved"
    shutil.copytree(store, moved)
    shutil.rmtree(store)
    store.mkdir()
    (store / "x").write_text("")
    copied = run_build([*SMALL, f"store={moved}"])
    assert copied.executed == [] and copied.cached == ALL


@pytest.mark.slow
@pytest.mark.parametrize("damage", ["garbage", "torn", "journal"])
def test_damaged_doit_database_is_discarded_not_fatal(run_build, store: Path, damage: str) -> None:
    """A build killed while sqlite wrote doit's database (a torn file, a left-over journal) or a
    database that is not one: the next build reuses everything and reports it truthfully."""
    run_build(SMALL)
    db = store / ".doit.sqlite3"
    if damage == "garbage":
        db.write_bytes(os.urandom(5000))
    elif damage == "torn":
        db.write_bytes(db.read_bytes()[: db.stat().st_size // 2] + os.urandom(100))
    else:
        (store / ".doit.sqlite3-journal").write_bytes(os.urandom(4096))
    again = run_build(SMALL)
    assert again.executed == [] and again.cached == ALL
    with closing(sqlite3.connect(db)) as conn:
        assert conn.execute("pragma quick_check").fetchone()[0] == "ok"


def test_dead_builds_temporary_folders_are_swept(store: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = store / "profile" / f".tmp-0123456789abcdef-{dead.pid}-x1"
    live = store / "profile" / f".tmp-0123456789abcdef-{os.getpid()}-x2"
    for d in (stale, live):
        d.mkdir(parents=True)
        (d / "timing.csv").write_text("partial")
    assert Store(store).sweep() == [stale]
    assert live.is_dir() and not stale.exists()


def test_unwritable_store_is_one_error(run_build, tmp_path: Path) -> None:
    from pimbuild.core.errors import StoreError

    blocked = tmp_path / "file-not-dir"
    blocked.write_text("")
    with pytest.raises(StoreError, match="cannot write .*file-not-dir"):
        run_build([*SMALL, f"store={blocked / 'store'}"])


@pytest.mark.slow
def test_two_builds_at_once_build_each_stage_once(tmp_path: Path) -> None:
    args = [*SMALL, f"store={tmp_path / 'store'}", "show_candidates=false"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    exe = Path(sys.executable).parent / "pimbuild"
    procs = [subprocess.Popen([str(exe), *args, f"hydra.run.dir={tmp_path / f'r{i}'}"],
                              cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for i in range(2)]
    assert [p.wait(timeout=600) for p in procs] == [0, 0]
    runs = [json.loads((tmp_path / f"r{i}" / "build.json").read_text()) for i in range(2)]
    built = [s for r in runs for s in r["executed"]]
    assert sorted(built) == sorted(ALL)  # every stage built exactly once, by one of them
    for r in runs:
        assert sorted(r["executed"] + r["cached"]) == sorted(ALL)


@pytest.mark.slow
def test_killed_builds_leave_a_store_the_next_build_completes(tmp_path: Path) -> None:
    """Fault injection: SIGKILL a cold build at a random moment, ten times; each time the
    next build completes, reuses every artifact the killed one published, unchanged, and no
    temporary folder is left."""
    rng = random.Random(9)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    exe = Path(sys.executable).parent / "pimbuild"
    for i in range(10):
        store = tmp_path / f"store{i}"
        args = [str(exe), *SMALL, f"store={store}", "show_candidates=false"]
        proc = subprocess.Popen([*args, f"hydra.run.dir={tmp_path / f'k{i}'}"], cwd=tmp_path,
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        time.sleep(rng.uniform(0.5, 9.0))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        published = {p: sorted(f.name for f in p.iterdir())
                     for p in store.glob("*/*") if (p / ".complete").is_file()}
        markers = {p: (p / ".complete").read_text() for p in published}
        done = run_cli([*SMALL, f"store={store}", "show_candidates=false",
                        f"hydra.run.dir={tmp_path / f'r{i}'}"], cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        build = json.loads((tmp_path / f"r{i}" / "build.json").read_text())
        assert build["repaired"] == {}
        reused = {Path(p).parent.name for p in published}
        assert reused <= set(build["cached"]), (i, reused, build)
        for p, marker in markers.items():
            assert (p / ".complete").read_text() == marker  # the same files, untouched
        assert not list(store.glob("**/.tmp-*")), i
