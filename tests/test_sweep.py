"""Multirun sweeps through the real command line (slow: subprocesses)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_cli


def _jobs(sweep_dir: Path) -> dict[str, dict]:
    """build.json of every job of a sweep, by job subdirectory name."""
    return {p.parent.name: json.loads(p.read_text()) for p in sweep_dir.glob("*/build.json")}


@pytest.mark.slow
def test_sweep_then_same_sweep_executes_nothing(tmp_path: Path) -> None:
    args = ["-m", "model=relu,softmax", "show_candidates=false"]
    first = run_cli([*args, f"hydra.sweep.dir={tmp_path / 'sweep1'}"], cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    jobs = _jobs(tmp_path / "sweep1")
    assert sorted(jobs) == ["0_relu", "1_softmax"]
    assert all(job["executed"][:2] == ["lower", "extract"] for job in jobs.values())

    second = run_cli([*args, f"hydra.sweep.dir={tmp_path / 'sweep2'}"], cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    jobs = _jobs(tmp_path / "sweep2")
    assert len(jobs) == 2
    assert all(job["executed"] == [] and "profile" in job["cached"]
               for job in jobs.values())
    manifests = sorted((tmp_path / "sweep2").glob("*/manifest.json"))
    assert len(manifests) == 2
    # one page for the sweep, linking each job's own
    from tests.test_page import parse

    sweep_page = parse((tmp_path / "sweep2" / "report.html").read_text())
    assert {"jobs", "plot", "job-pages"} <= set(sweep_page.sections)
    assert {"0_relu", "1_softmax"} <= set(sweep_page.cells)
    assert all((tmp_path / "sweep2" / j / "report.html").is_file() for j in ("0_relu",
                                                                            "1_softmax"))


@pytest.mark.slow
def test_cli_help_and_cfg(tmp_path: Path) -> None:
    helped = run_cli(["--help"], cwd=tmp_path)
    assert helped.returncode == 0
    assert "model=" in helped.stdout and "softmax" in helped.stdout
    shown = run_cli(["--cfg", "job", "model=gemv", "pim.cores=32"], cwd=tmp_path)
    assert shown.returncode == 0
    assert "name: gemv" in shown.stdout and "cores: 32" in shown.stdout
    assert not (tmp_path / "outputs" / "artifacts").exists()


def _twice_in_parallel(tmp_path: Path, launcher: list[str]) -> dict[str, dict]:
    """Two jobs on one store with ``launcher``: the artifacts both need (runtime, calibrate)
    are built once, by one of them; the same sweep again builds nothing. The first sweep's
    jobs (``_jobs``)."""
    args = ["-m", *launcher, "model=relu,softmax", "profile.backend=timer",
            "show_candidates=false"]
    first = run_cli([*args, f"hydra.sweep.dir={tmp_path / 'sweep1'}"], cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    jobs = _jobs(tmp_path / "sweep1")
    assert sorted(jobs) == ["0_relu", "1_softmax"]
    for shared in ("runtime", "calibrate"):
        assert sum(shared in job["executed"] for job in jobs.values()) == 1
        assert all(shared in job["executed"] + job["cached"] for job in jobs.values())
    second = run_cli([*args, f"hydra.sweep.dir={tmp_path / 'sweep2'}"], cwd=tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert all(job["executed"] == [] for job in _jobs(tmp_path / "sweep2").values())
    assert not list((tmp_path / "outputs" / "artifacts").glob("**/.tmp-*"))
    assert (tmp_path / "sweep2" / "report.html").is_file()
    return jobs


@pytest.mark.slow
def test_parallel_sweep_with_joblib_shares_one_store(tmp_path: Path) -> None:
    """Two joblib workers on one store (``_twice_in_parallel``)."""
    _twice_in_parallel(tmp_path, ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"])


@pytest.mark.slow
def test_parallel_sweep_on_a_local_ray_cluster_shares_one_store(tmp_path: Path) -> None:
    """Hydra's Ray launcher starts a local Ray cluster of two CPUs and runs the two jobs on
    it, one per worker process, on one store (``_twice_in_parallel``)."""
    jobs = _twice_in_parallel(tmp_path, [
        "hydra/launcher=ray", "+hydra.launcher.ray.init.num_cpus=2",
        "+hydra.launcher.ray.init.include_dashboard=false",
        "+hydra.launcher.ray.remote.num_cpus=1"])
    assert len({job["pid"] for job in jobs.values()}) == 2


@pytest.mark.slow
def test_a_monitor_sweep_is_one_table_and_rebuilds_only_simulate(tmp_path: Path) -> None:
    from tests.targets.gpus.test_gpus import TINY_LLAMA3

    args = ["-m", "system=gpus", *TINY_LLAMA3, "serve.requests=20", "serve.rate=3000",
            "serve.beta=1.01,1000", "serve.window_s=0.001", f"hydra.sweep.dir={tmp_path / 's'}"]
    done = run_cli(args, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = _jobs(tmp_path / "s")
    assert len(jobs) == 2
    second = next(job for name, job in jobs.items() if name.startswith("1_"))
    assert second["executed"] == ["simulate"]
    table = (tmp_path / "s" / "sweep_summary.md").read_text()
    assert "switches" in table and "serve.beta=1000" in table


@pytest.mark.slow
def test_a_failing_job_does_not_stop_the_sweep(tmp_path: Path) -> None:
    """The failing job's error goes to its error.txt and the summary, the other job is built
    and summarized, and the command exits 1."""
    sweep = tmp_path / "sweep"
    done = run_cli(["-m", "model=relu", "model.size={n:4096}", "profile.backend=timer",
                    "model.recipe=tests.bad_recipes:raising,pimbuild.recipes.operators:relu",
                    "show_candidates=false", f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "broken on purpose" in (sweep / "0_relu" / "error.txt").read_text()
    assert (sweep / "1_relu" / "manifest.json").is_file()
    summary = json.loads((sweep / "sweep_summary.json").read_text())
    assert [r["job"] for r in summary] == ["1_relu"]
    md = (sweep / "sweep_summary.md").read_text()
    assert "## Failed jobs" in md and "- 0_relu: " in md
    assert "1 of the sweep's jobs failed" in done.stdout
    from tests.test_page import parse

    failed = parse((sweep / "report.html").read_text())
    assert "failed-jobs" in failed.sections and "0_relu" in failed.cells


@pytest.mark.slow
def test_an_optuna_search_returns_each_builds_objective(tmp_path: Path) -> None:
    """Optuna's sweeper (hydra/sweeper=optuna) gets each build's objective (its report's
    headline) and names the best trial's; the sweep's page and table are written as for a
    grid."""
    import yaml

    sweep = tmp_path / "sweep"
    done = run_cli(["-m", "hydra/sweeper=optuna", "hydra.sweeper.n_trials=3",
                    "hydra.sweeper.direction=maximize", "hydra.sweeper.sampler.seed=0",
                    "policy.theta_ratio=interval(0.01,1.0)", "model=relu",
                    "model.size={n:65536}", "show_candidates=false",
                    f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    best = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    rows = json.loads((sweep / "sweep_summary.json").read_text())
    assert len(rows) == 3
    assert best["best_value"] == pytest.approx(max(r["headline"]["value"] for r in rows))
    assert 0.01 <= best["best_params"]["policy.theta_ratio"] <= 1.0
    assert (sweep / "report.html").is_file()


def test_an_objective_the_report_lacks_is_one_line(tmp_path: Path) -> None:
    from pimbuild.commands.cli import objective
    from pimbuild.core.errors import PimbuildError

    folder = tmp_path / "simulate"
    folder.mkdir()
    (folder / "report.json").write_text(json.dumps({"headline": {"value": 2.5},
                                                    "sweep_columns": {"Perf/$": "12.5"}}))
    manifest = {"stages": {"simulate": {"dir": str(folder)}}}
    assert objective(manifest, "headline") == 2.5 and objective(manifest, "Perf/$") == 12.5
    with pytest.raises(PimbuildError, match=r"objective=speed: the report has no such column "
                                             r"\(it has headline, Perf/\$\)"):
        objective(manifest, "speed")
    assert objective({"stages": {}}, "headline") is None
