"""A plug-in's own options: a planner, a policy, a PIM timing model, a copy model, a fusion
mode, a counter backend and a kernel-time backend of one's own each declare a dataclass
``Options`` with a field, and the config checks its values like any group's (exact types,
ranges, unknown names with the nearest known one), in one error line before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pimbuild.build.graph import plan
from pimbuild.core.artifacts import Store
from pimbuild.core.errors import ConfigError
from pimbuild.core.registry import Registry
from tests.conftest import artifact_dir, candidates, make_cfg

PLANNERS = Path(__file__).parent / "planners"
PARTS = Path(__file__).parent / "parts"  # a copy model, fusion mode and two backends
PINNED = ["system=gpus", "model=mlp", "devices=[a100,l40s]",
          "gpus.planner=tests.planners.pinned:place"]


def _keys(tmp_path: Path, *overrides: str, base: tuple[str, ...] = tuple(PINNED)
          ) -> dict[str, str]:
    cfg = make_cfg(tmp_path / "store", [*base, *overrides])
    return {t.stage: t.artifact.key for t in plan(cfg, Store(tmp_path / "s"), tmp_path / "f")}


def test_the_planner_policy_and_timing_model_are_one_file_each() -> None:
    for folder, plug_in in ((PLANNERS, "pinned.py"), (PLANNERS.parent / "policies", "top_k.py"),
                            (PLANNERS.parent / "timing", "flat.py")):
        assert sorted(p.name for p in folder.glob("*.py")) == ["__init__.py", plug_in]
        assert (folder / "__init__.py").read_text() == ""
    assert sorted(p.name for p in PARTS.glob("*.py")) == [
        "__init__.py", "elementwise_only.py", "fixed_reads.py", "flat_kernels.py",
        "scaled_copies.py"]


# Each part of one's own, its option, and the first stage whose key the option enters.
PARTS_OPTIONS = [
    (("sim.copy_model=tests.parts.scaled_copies",), "+sim.copy_model_options.factor=2.0",
     "decide", "lower"),
    (("lowering.fusion=tests.parts.elementwise_only",), "+lowering.fusion_options.fuse=false",
     "lower", None),
    (("profile.backend=tests.parts.fixed_reads",), "+profile.backend_options.lines=7",
     "profile", "lower"),
    (("system=gpus", "model=mlp", "gpus.backend=tests.parts.flat_kernels"),
     "+gpus.backend_options.us=3.0", "profile", "extract"),
]


@pytest.mark.parametrize(("base", "option", "stage", "before"), PARTS_OPTIONS)
def test_a_parts_option_enters_its_stages_key(tmp_path: Path, base: tuple[str, ...],
                                              option: str, stage: str, before: str | None
                                              ) -> None:
    default, chosen = _keys(tmp_path, base=base), _keys(tmp_path, option, base=base)
    assert default[stage] != chosen[stage]
    if before:
        assert default[before] == chosen[before]


@pytest.mark.parametrize(("base", "option", "message"), [
    (PARTS_OPTIONS[0][0], "+sim.copy_model_options.factor=0",
     r"^sim.copy_model_options of copy model 'tests.parts.scaled_copies': 'factor' must be > "
     r"0.0 \(got 0\)$"),
    (PARTS_OPTIONS[1][0], "+lowering.fusion_options.fuse=3",
     r"^lowering.fusion_options of fusion mode 'tests.parts.elementwise_only': 'fuse' input "
     r"should be a valid boolean \(got 3\)$"),
    (PARTS_OPTIONS[2][0], "+profile.backend_options.line=7",
     r"'line' is not a field of this format; did you mean 'lines'\?$"),
    ((), "+profile.backend_options.lines=7",
     r"^profile.backend_options \(lines\) are one backend's own: name it"),
    (PARTS_OPTIONS[3][0], "+gpus.backend_options.us=-1.0",
     r"^gpus.backend_options of kernel-time backend 'tests.parts.flat_kernels': 'us' must "
     r"be > 0.0 \(got -1.0\)$"),
    (("system=gpus", "model=mlp"), "+gpus.backend_options.us=1.0",
     r"kernel-time backend 'auto': it takes no options \(got us\)$"),
    (("sim.copy_model=resident",), "+sim.copy_model_options.factor=2.0",
     r"copy model 'resident': it takes no options \(got factor\)$"),
])
def test_a_parts_bad_option_is_one_line(tmp_path: Path, base: tuple[str, ...], option: str,
                                        message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        _keys(tmp_path, option, base=base)
    assert "\n" not in str(err.value) and not (tmp_path / "s").exists()


def test_the_gpu_kernel_time_backend_moved_to_the_gpus_group(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^profile.backend is the counter backend of the "
                                          r"host-and-accelerator targets .*; the GPU target's "
                                          r"kernel-time backend is gpus.backend: "
                                          r"gpus.backend=roofline$"):
        _keys(tmp_path, "profile.backend=roofline", base=("system=gpus", "model=mlp"))


def test_its_option_enters_the_decide_key(tmp_path: Path) -> None:
    zero, one = _keys(tmp_path), _keys(tmp_path, "+gpus.planner_options.device=1")
    assert zero["profile"] == one["profile"] and zero["decide"] != one["decide"]
    assert _keys(tmp_path, "+gpus.planner_options.device=0")["decide"] == zero["decide"]


@pytest.mark.parametrize(("override", "message"), [
    ("+gpus.planner_options.device=-1", r"gpus.planner_options of planner "
                                        r"'tests.planners.pinned:place': 'device' must be >= 0 "
                                        r"\(got -1\)$"),
    ("+gpus.planner_options.devcie=1", r"'devcie' is not a field of this format; did you "
                                       r"mean 'device'\?$"),
    ("+gpus.planner_options.device=1.5", r"'device' must be a whole number \(got 1.5\)$"),
    ("+gpus.planner_options.device=true", r"'device' must be a whole number \(got True\)$"),
])
def test_a_bad_option_is_one_line_before_anything_runs(tmp_path: Path, override: str,
                                                       message: str) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        _keys(tmp_path, override)
    assert "\n" not in str(err.value) and not (tmp_path / "s").exists()


def test_a_planner_without_options_refuses_them(tmp_path: Path) -> None:
    cfg = make_cfg(tmp_path, ["system=gpus", "model=mlp", "devices=[a100,l40s]",
                              "+gpus.planner_options.device=1"])
    with pytest.raises(ConfigError, match=r"planner 'throughput': it takes no options "
                                          r"\(got device\)"):
        plan(cfg, Store(tmp_path / "s"), tmp_path / "f")


def test_options_with_no_default_are_asked_for() -> None:
    from dataclasses import dataclass

    @dataclass(frozen=True)
    class Options:
        width: int

    def entry() -> None: ...

    entry.Options = Options  # type: ignore[attr-defined]
    r = Registry("thing", "thing.name", options="thing.options")
    r.register("x", entry)
    with pytest.raises(ConfigError, match=r"thing.options of thing 'x': 'width' is missing"):
        r.options("x", {})
    assert r.options("x", {"width": 3}) == Options(3)


@pytest.mark.slow
def test_the_planner_places_by_its_option(run_build) -> None:
    result = run_build([*PINNED, "+gpus.planner_options.device=1"])
    placement = json.loads((artifact_dir(result, "decide") / "placement.json").read_text())
    assert placement["planner"] == "tests.planners.pinned:place"
    assert {k["device"] for k in placement["kernels"]} == {"l40s"}


def test_a_policy_reads_its_typed_option(tmp_path: Path) -> None:
    from pimbuild.targets.offload.decide import policy_params

    cfg = make_cfg(tmp_path, ["policy.name=tests.policies.top_k:place",
                              "+policy.options.k=3"])
    assert policy_params(cfg).options.k == 3
    bad = make_cfg(tmp_path, ["policy.name=tests.policies.top_k:place", "+policy.options.k=0"])
    with pytest.raises(ConfigError, match=r"^policy.options of policy 'tests.policies.top_k:"
                                          r"place': 'k' must be >= 1 \(got 0\)$"):
        policy_params(bad)
    builtin = make_cfg(tmp_path, ["+policy.options.k=3"])
    with pytest.raises(ConfigError, match=r"policy 'torchpim': it takes no options"):
        policy_params(builtin)


@pytest.mark.slow
def test_the_policy_offloads_by_its_option(run_build) -> None:
    result = run_build(["model=mlp", "policy.name=tests.policies.top_k:place",
                        "+policy.options.k=2"])
    decisions = json.loads((artifact_dir(result, "decide") / "decisions.json").read_text())
    assert decisions["params"] == {"k": 2} and len(decisions["offloaded"]) == 2


def test_the_pim_timing_model_is_swapped_with_its_option(tmp_path: Path) -> None:
    from pimbuild import targets
    from tests.targets.pim.test_pim_model import nest

    flat = ["pim.model=tests.timing.flat:invocation_time", "+pim.model_options.ns_per_element=2"]
    t = targets.from_config(make_cfg(tmp_path, flat))
    n = nest(n_iter=1024, inner=1024)
    assert t.unit_time(n) == pytest.approx(t.costs.overhead_s(1024) + (1 << 20) * 2e-9 / 128)
    assert targets.from_config(make_cfg(tmp_path, [])).unit_time(n) != t.unit_time(n)
    with pytest.raises(ConfigError, match=r"^pim.model_options of PIM timing model "
                                          r"'tests.timing.flat:invocation_time': "
                                          r"'ns_per_element' must be > 0.0 \(got 0\)$"):
        targets.from_config(make_cfg(tmp_path, [flat[0], "+pim.model_options.ns_per_element=0"]))
    with pytest.raises(ConfigError, match=r"unknown PIM timing model 'nonesuch' \(pim.model\)"):
        targets.from_config(make_cfg(tmp_path, ["pim.model=nonesuch"]))


@pytest.mark.slow
def test_the_parts_act_by_their_options(run_build) -> None:
    """A build with each part of one's own, its option set: the nests, the counts, the
    copies (every nest offloaded) and the kernel times are what the options say."""
    pim = run_build(["model=mlp", "sim.copy_model=tests.parts.scaled_copies",
                     "+sim.copy_model_options.factor=2.0",
                     "lowering.fusion=tests.parts.elementwise_only",
                     "+lowering.fusion_options.fuse=false",
                     "profile.backend=tests.parts.fixed_reads",
                     "+profile.backend_options.lines=7",
                     "policy.name=tests.policies.top_k:place", "+policy.options.k=1000",
                     "timeline=true"])
    unfused = run_build(["model=mlp", "lowering.fusion=none", "stages=[extract]"])
    fused = run_build(["model=mlp", "stages=[extract]"])
    assert len(candidates(pim)) == len(candidates(unfused)) > len(candidates(fused))
    counters = (artifact_dir(pim, "profile") / "counters.csv").read_text().splitlines()
    assert counters[0].split(",")[3] == "event:offcore_data_rd"
    assert {row.split(",")[3] for row in counters[1:]} == {"7"}
    report = json.loads((artifact_dir(pim, "simulate") / "report.json").read_text())
    assert len(report["offloaded"]) == len(candidates(pim))
    t_copy = report["t_copy"]  # the configured copy model and eq. 8, one placement
    assert t_copy["upper_bound"] > 0
    assert t_copy["tests.parts.scaled_copies"] == pytest.approx(2 * t_copy["upper_bound"])
    # the timeline draws the same schedule, the copies at their option's factor too
    events = json.loads((artifact_dir(pim, "simulate") / "timeline.json").read_text())
    spans = [e["dur"] for e in events["traceEvents"] if e["ph"] == "X"]
    assert sum(spans) * 1e-6 == pytest.approx(report["t_hybrid_s"], rel=1e-9)
    gpus = run_build(["system=gpus", "model=mlp", "gpus.backend=tests.parts.flat_kernels",
                      "+gpus.backend_options.us=3.0", "stages=[profile]"])
    times = (artifact_dir(gpus, "profile") / "kernel_times.csv").read_text().splitlines()
    assert {float(v) for row in times[1:] for v in row.split(",")[-2:]} == {3e-6}


def test_a_package_entry_imported_once_is_found_without_listing_the_package(
        monkeypatch) -> None:
    """A registry asked again for a built-in entry it imported does not list its package
    again (the copy model is asked once per hybrid evaluation); an unknown name, or a private
    module of the package, is still refused."""
    import pkgutil

    from pimbuild.targets.offload.policies import POLICIES

    first = POLICIES.get("torchpim")
    monkeypatch.setattr(pkgutil, "iter_modules", lambda *a, **k: iter(()))
    assert POLICIES.get("torchpim") is first
    with pytest.raises(ConfigError, match=r"unknown policy 'torchpimm'"):
        POLICIES.get("torchpimm")
    import sys
    from types import ModuleType

    # a private module of the package, imported, is still not an entry
    monkeypatch.setitem(sys.modules, f"{POLICIES.package}._private", ModuleType("_private"))
    with pytest.raises(ConfigError, match=r"unknown policy '_private'"):
        POLICIES.get("_private")
