"""instrument + profile: markers around every nest, timing, and the counter backends."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from pimbuild import frontend
from pimbuild.codegen import jit
from pimbuild.codegen.runtime import LIBRARY, Markers, compiler
from pimbuild.core.errors import StageError
from pimbuild.frontend import lower
from pimbuild.targets.offload.counters.footprint import footprint_counts
from pimbuild.targets.offload.eager import eager_comparison
from pimbuild.targets.offload.instrument import ENTER, EXIT, FORWARD_REGION
from pimbuild.targets.offload.program import nest_candidates
from tests.conftest import artifact_dir, candidates, make_cfg


def _csv(result, stage: str, name: str) -> list[dict]:
    with (artifact_dir(result, stage) / name).open() as f:
        return list(csv.DictReader(f))


def _profile_json(result) -> dict:
    return json.loads((artifact_dir(result, "profile") / "profile.json").read_text())


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [
    ["model=softmax"],
    ["model=mlp", "model.size.hidden=512", "model.size.ffn=2048"],
])
def test_every_nest_timed_and_coverage(run_build, overrides: list[str]) -> None:
    result = run_build([*overrides, "profile.backend=timer", "profile.repetitions=5",
                        "stages=[profile]"])
    timing = _csv(result, "profile", "timing.csv")
    assert [int(r["id"]) for r in timing] == [c["id"] for c in candidates(result)]
    assert all(int(r["invocations"]) == 1 for r in timing)
    assert all(float(r["median_s"]) > 0 for r in timing)
    info = _profile_json(result)
    assert info["coverage"] >= 0.9
    assert info["coverage"] <= 1.0 + 1e-9
    assert sum(float(r["median_s"]) for r in timing) <= info["forward_median_s"] * 1.05


@pytest.mark.slow
def test_profile_loads_the_object_instrument_compiled(run_build, monkeypatch) -> None:
    """The profile stage runs forward.o, not a second compile of llvm.mlir; where the link
    fails it compiles llvm.mlir again, says why, and times the same nests."""
    overrides = ["model=softmax", "profile.backend=timer", "profile.repetitions=3",
                 "stages=[profile]"]
    linked = _profile_json(run_build(overrides))
    assert linked["program"] == "forward.o linked as a shared library"
    assert set(linked["seconds"]) == {"load", "arguments", "timing", "counters"}

    def refused(*args):
        raise OSError("cannot make segment writable for relocation")
    monkeypatch.setattr(jit, "load_object", refused)
    result = run_build([*overrides, "profile.warmup=2"])  # a new profile key
    assert _profile_json(result)["program"] == (
        "llvm.mlir compiled again (OSError: cannot make segment writable for relocation)")
    assert [int(r["invocations"]) for r in _csv(result, "profile", "timing.csv")] == \
        [1] * len(candidates(result))


@pytest.mark.slow
def test_loaded_object_calls_its_own_functions(run_build, tmp_path: Path) -> None:
    """A global function the process already has under the name of one of the module's own
    (``forward``) does not take the module's calls to it (a separate process, so nothing of
    the kind stays loaded here)."""
    result = run_build(["model=softmax", "stages=[instrument]"])
    source, impostor = tmp_path / "impostor.c", tmp_path / "libimpostor.so"
    source.write_text("#include <stdlib.h>\nvoid forward(void) { abort(); }\n")
    subprocess.run([compiler(), "-shared", "-fPIC", "-o", str(impostor), str(source)],
                   check=True)
    paths = {"impostor": str(impostor),
             "signature": str(artifact_dir(result, "lower") / "signature.json"),
             "object": str(artifact_dir(result, "instrument") / "forward.o"),
             "runtime": str(artifact_dir(result, "runtime") / LIBRARY)}
    script = f"""
import ctypes, json
from pathlib import Path
import numpy as np
paths = {paths!r}
ctypes.CDLL(paths["impostor"], mode=ctypes.RTLD_GLOBAL)
from pimbuild.codegen import jit
sig = json.loads(Path(paths["signature"]).read_text())
engine = jit.load_object(Path(paths["object"]), [Path(paths["runtime"])], {compiler()!r})
args = [np.ones(a["shape"], dtype=jit.NP_DTYPES[a["dtype"]]) for a in sig["args"]]
(out,) = jit.invoke(engine, sig["function"], args, sig["outputs"])
print(out.shape[-1] * float(out.sum()) / out.size)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert float(proc.stdout.split()[-1]) == pytest.approx(1.0)  # softmax rows sum to 1


@pytest.mark.slow
@pytest.mark.parametrize("model,loader", [("softmax", "jit"), ("mlp", "jit"),
                                          ("softmax", "object"), ("mlp", "object")])
def test_instrumented_program_matches_eager(run_build, tmp_path: Path, model: str,
                                            loader: str) -> None:
    """llvm.mlir compiled by the ExecutionEngine, and forward.o linked as a shared library,
    compute eager's result and call each marker once per nest."""
    overrides = [f"model={model}", "stages=[instrument]"]
    result = run_build(overrides)
    lo = artifact_dir(result, "lower")
    signature = json.loads((lo / "signature.json").read_text())
    runtime_lib = artifact_dir(result, "runtime") / LIBRARY
    markers = Markers(runtime_lib)
    if loader == "jit":
        engine = jit.load_llvm(artifact_dir(result, "instrument") / "llvm.mlir",
                               markers.symbols([ENTER, EXIT]))
    else:
        engine = jit.load_object(artifact_dir(result, "instrument") / "forward.o",
                                 [runtime_lib], compiler())
    args, expected = frontend.materialize(lower.model_params(make_cfg(tmp_path, overrides)),
                                          signature)
    markers.reset()
    (got,) = jit.invoke(engine, signature["function"], args, signature["outputs"])
    scale = float(np.abs(expected[0]).max())
    assert float(np.abs(got - expected[0]).max()) / scale <= 1e-5
    n = len(candidates(result))
    assert list(markers.counts(n)) == [1] * n
    assert markers.counts(FORWARD_REGION + 1)[FORWARD_REGION] == 1


@pytest.mark.slow
def test_valgrind_streaming_misses_match_bytes_read(run_build) -> None:
    n = 1 << 24  # 64 MB per operand
    result = run_build(["model=ew_add", f"model.size.n={n}", "profile.backend=valgrind",
                        "profile.repetitions=3", "profile.warmup=1", "stages=[profile]"])
    (nest,) = candidates(result)
    (row,) = _csv(result, "profile", "counters.csv")
    assert row["counter_source"] == "valgrind"
    read_bytes = sum(nest["reads"].values())
    assert read_bytes == 2 * 4 * n
    missed_bytes = int(row["event:offcore_data_rd"]) * 64
    assert abs(missed_bytes - read_bytes) <= 0.1 * read_bytes
    t_cpu = float(row["t_cpu_s"])
    assert float(row["bw_read_gbps"]) == pytest.approx(missed_bytes / t_cpu / 1e9, rel=1e-9)


@pytest.mark.slow
def test_valgrind_counts_a_nest_run_in_a_loop_in_one_dump(run_build) -> None:
    """A nest inside the loop over the rows runs 4096 times: its invocations in a row make one
    callgrind dump (not one each), which counts the nest's own loads (not the markers') and
    misses each line of x once."""
    result = run_build(["model=relu", "model.recipe=tests.odd_recipes:column_sum",
                        "model.size={n:64}", "profile.backend=valgrind",
                        "profile.repetitions=3", "profile.warmup=1", "stages=[profile]"])
    timing = {r["id"]: int(r["invocations"]) for r in _csv(result, "profile", "timing.csv")}
    looped = max(timing, key=timing.get)
    assert timing[looped] == 4096
    dumps = list((artifact_dir(result, "profile") / "valgrind").glob("callgrind.out.*"))
    assert len(dumps) <= len(timing)
    row = next(r for r in _csv(result, "profile", "counters.csv") if r["id"] == looped)
    assert int(row["event:data_reads"]) < 32 * 4096  # the markers' work was ~170 a call
    assert abs(int(row["event:offcore_data_rd"]) - 4096 * 4 * 4 // 64) <= 16


@pytest.mark.slow
def test_valgrind_cache_resident_matmul_misses_little(run_build) -> None:
    result = run_build(["model=matmul", "model.size.n=128", "profile.backend=valgrind",
                        "profile.repetitions=3", "profile.warmup=1", "stages=[profile]"])
    rows = _csv(result, "profile", "counters.csv")
    mm = max(candidates(result), key=lambda c: c["n_total"])
    accessed = mm["n_iter"] * (mm["op_mix"]["loads"] + mm["op_mix"]["stores"]) * 4
    missed = int(next(r for r in rows if int(r["id"]) == mm["id"])["event:offcore_data_rd"]) * 64
    assert missed < 0.05 * accessed


@pytest.fixture
def markers(run_build, store: Path) -> Markers:
    """The marker runtime this host builds, loaded (only the runtime stage is built)."""
    run_build(["model=relu", "model.size.n=16", "stages=[runtime]"])
    return Markers(next((store / "runtime").glob("*/" + LIBRARY)))


def _papi_counts_paper_events(markers: Markers) -> tuple[bool, str]:
    n, reason = markers.papi_start(["OFFCORE_REQUESTS:ALL_DATA_RD"])
    markers.papi_stop()
    return n > 0, reason


@pytest.mark.slow
def test_auto_falls_back_with_papi_reason(run_build, markers: Markers) -> None:
    counts, reason = _papi_counts_paper_events(markers)
    if counts:
        pytest.skip("this host's PMU counts the paper's events: auto chooses papi")
    info = _profile_json(run_build(["model=relu", "model.size.n=4096",
                                    "profile.repetitions=3", "stages=[profile]"]))
    assert info["requested_backend"] == "auto"
    assert info["counter_backend"] == "footprint"
    assert reason in info["counter_backend_reason"]


@pytest.mark.slow
def test_auto_takes_the_first_available_of_its_order(run_build, markers: Markers,
                                                     monkeypatch) -> None:
    """``profile.auto`` is tried in order: valgrind first where a user puts it first, and the
    next one, with the reason, where valgrind is missing."""
    if _papi_counts_paper_events(markers)[0]:
        pytest.skip("this host's PMU counts the paper's events: auto chooses papi")
    from pimbuild.targets.offload.counters import valgrind

    over = ["model=relu", "model.size.n=4096", "profile.repetitions=3", "stages=[profile]",
            "profile.auto=[valgrind,footprint]"]
    if valgrind.available()[0]:
        assert _profile_json(run_build(over))["counter_backend"] == "valgrind"
    monkeypatch.setattr(valgrind, "available", lambda run=None: (False, "valgrind not found"))
    result = run_build([*over, "profile.repetitions=4"])  # another artifact
    info = _profile_json(result)
    assert info["counter_backend"] == "footprint"
    assert "valgrind not found" in info["counter_backend_reason"]
    (row,) = _csv(result, "profile", "counters.csv")
    assert int(row["event:offcore_data_rd"]) == 4096 * 4 // 64


@pytest.mark.slow
def test_papi_hardware_event_fails_with_papi_reason(run_build, markers: Markers) -> None:
    counts, reason = _papi_counts_paper_events(markers)
    if counts:
        pytest.skip("this host has a PMU: the paper's events can be counted")
    with pytest.raises(StageError, match=r"PAPI cannot count .*OFFCORE_REQUESTS") as err:
        run_build(["model=relu", "model.size.n=4096", "profile.backend=papi",
                   "profile.repetitions=2", "stages=[profile]"])
    assert reason in str(err.value)


def test_papi_software_events_agree_with_timer(run_build, markers: Markers) -> None:
    status = markers.perf_event_status()
    if status:
        pytest.skip(f"PAPI's perf_event component is disabled on this host: {status}")
    result = run_build(["model=ew_add", "model.size.n=4194304", "platform=generic_vm",
                        "profile.backend=papi", "profile.repetitions=5", "stages=[profile]"])
    rows = _csv(result, "profile", "counters.csv")
    timing = _csv(result, "profile", "timing.csv")
    for row, t in zip(rows, timing, strict=True):
        assert row["counter_source"] == "papi"
        task_clock_s = float(row["event:task_clock"]) * 1e-9
        # One counted forward: within the timing run's range, with room for a VM's noise.
        assert 0.5 * float(t["min_s"]) <= task_clock_s <= 2.0 * float(t["max_s"])


@pytest.mark.slow
def test_profile_settings_rerun_only_profile(run_build) -> None:
    base = ["model=relu", "model.size.n=4096", "profile.backend=timer", "stages=[profile]"]
    run_build([*base, "profile.repetitions=3"])
    again = run_build([*base, "profile.repetitions=4"])
    assert again.executed == ["profile"]


class _Writes(torch.nn.Module):
    """A forward that writes one buffer in place and replaces another by assignment."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.ones(8))
        self.register_buffer("steps", torch.zeros(()))

    def forward(self, x):
        self.state.mul_(2)
        self.steps = self.steps + 1
        return x + self.state


def test_eager_comparison_times_both_and_keeps_the_buffers() -> None:
    """Alternate forwards on one thread: a program that sleeps 2 ms is slower than a tiny
    eager forward, and the forward's buffer writes are undone, so the arrays the lowered
    program reads (views of them) still hold the state eager's check started from."""
    import time

    module = _Writes()
    state, steps = module.state, module.steps
    threads = torch.get_num_threads()
    r = eager_comparison(lambda: time.sleep(0.002), module, [torch.zeros(8)], rounds=5)
    assert r["rounds"] == 5 and r["threads"] == 1
    assert r["lowered_median_s"] >= 0.002 > r["eager_median_s"]
    assert r["ratio"] > 1
    assert r["ratio_p25"] <= r["ratio"] <= r["ratio_p75"]
    assert module.state is state and module.steps is steps
    assert torch.equal(state, torch.ones(8)) and steps.item() == 0
    assert torch.get_num_threads() == threads
    more = eager_comparison(lambda: None, module, [torch.zeros(8)], rounds=2, min_time_s=0.01)
    assert more["rounds"] > 2  # until the program's forwards add up to min_time_s


class _Sleeps(torch.nn.Module):
    """An eager forward that sleeps for the next of ``seconds``."""

    def __init__(self, seconds: list[float]) -> None:
        super().__init__()
        self.seconds = iter(seconds)

    def forward(self, x):
        import time

        time.sleep(next(self.seconds))
        return x


def test_eager_ratio_is_the_median_of_the_rounds_own_ratios() -> None:
    """Each round's two forwards run back to back; the ratio is the median of the rounds'
    ratios (here 2: four of five rounds ran the program twice as long as eager), not the
    ratio of the two medians (2 ms / 8 ms), which pairs forwards from different rounds. The
    first round is not timed."""
    import time

    ms = 0.001
    lowered = iter([ms, 2 * ms, 2 * ms, 2 * ms, 16 * ms, 16 * ms])
    eager = _Sleeps([ms, ms, ms, 8 * ms, 8 * ms, 8 * ms])
    r = eager_comparison(lambda: time.sleep(next(lowered)), eager, [torch.zeros(1)], rounds=5)
    assert r["rounds"] == 5
    assert r["lowered_median_s"] == pytest.approx(2 * ms, rel=0.5)
    assert r["eager_median_s"] == pytest.approx(8 * ms, rel=0.2)
    assert r["ratio"] == pytest.approx(2, rel=0.2)
    assert r["ratio_p25"] <= r["ratio"] <= r["ratio_p75"]


def test_eager_rounds_must_count(tmp_path: Path) -> None:
    from pimbuild.core.errors import ConfigError
    from pimbuild.targets.offload import eager

    with pytest.raises(ConfigError, match="profile.eager_rounds is -1"):
        eager.params(make_cfg(tmp_path, ["profile.eager_rounds=-1"]))


def test_calibrate_measures_b_cpu_through_the_lowered_kernel(run_build) -> None:
    result = run_build(["stages=[calibrate]", "platform.calibration_mib=32",
                        "profile.repetitions=3"])
    cal = json.loads((artifact_dir(result, "calibrate") / "calibrate.json").read_text())
    assert cal["source"] == "measured"
    assert 32 << 20 <= cal["bytes_read"] <= (32 << 20) * 1.001  # the buffer + the row sums
    assert cal["b_cpu_gbps"] == pytest.approx(cal["bytes_read"] / cal["best_s"] / 1e9)
    assert cal["best_s"] <= cal["p25_s"] <= cal["median_s"]
    assert 0.1 < cal["b_cpu_gbps"] < 1000
    assert (artifact_dir(result, "calibrate") / "kernel" / "llvm.mlir").is_file()
    again = run_build(["stages=[calibrate]", "platform.calibration_mib=32",
                       "profile.repetitions=3", "model=gemv"])
    assert again.executed == []  # per host and platform, not per model


def test_calibrate_uses_configured_b_cpu(run_build) -> None:
    result = run_build(["stages=[calibrate]", "platform.b_cpu_gbps=7.5"])
    cal = json.loads((artifact_dir(result, "calibrate") / "calibrate.json").read_text())
    assert cal == {"b_cpu_gbps": 7.5, "source": "config (platform.b_cpu_gbps)",
                   "register_block": {"value": 16,
                                      "source": "config (lowering.register_block)"}}


def test_calibration_refuses_an_unstable_value(run_build, store: Path) -> None:
    """No spread is small enough: calibrate says why and publishes nothing."""
    with pytest.raises(StageError, match=r"B_cpu is not stable on this host now: in each of "
                                         r"2 rounds .*platform.b_cpu_gbps"):
        run_build(["model=relu", "stages=[calibrate]", "platform.calibration_rounds=2",
                   "platform.calibration_max_spread=0", "platform.calibration_repetitions=4"])
    assert not list((store / "calibrate").glob("*/.complete"))


def test_calibration_records_its_spread_and_a_tag_measures_again(run_build) -> None:
    first = run_build(["model=relu", "stages=[calibrate]"])
    cal = json.loads((artifact_dir(first, "calibrate") / "calibrate.json").read_text())
    assert cal["b_cpu_gbps"] == pytest.approx(cal["bytes_read"] / cal["best_s"] / 1e9)
    assert 0 <= cal["rounds"][-1]["spread"] <= 0.5 and len(cal["rounds"][-1]["load_average"]) == 3
    again = run_build(["model=relu", "stages=[calibrate]", "platform.calibration_tag=today"])
    assert again.executed == ["calibrate"]


@pytest.mark.slow
def test_valgrind_warm_counts_and_the_l2_as_last_level(run_build) -> None:
    """Two 1 MiB operands: more than the L2, far less than the LLC. Counted cold (after the
    driver flushes the caches) every byte read misses; counted warm (a forward after a
    forward) they hit the LLC, but with the L2 as the last level they leave it again."""
    n = 1 << 18
    read_bytes = 2 * 4 * n

    def missed(*over: str) -> int:
        result = run_build(["model=ew_add", f"model.size.n={n}", "profile.backend=valgrind",
                            "profile.repetitions=3", "profile.warmup=1", "stages=[profile]",
                            "platform=icelake_sp", *over])
        (row,) = _csv(result, "profile", "counters.csv")
        return int(row["event:offcore_data_rd"]) * 64

    assert abs(missed() - read_bytes) <= 0.1 * read_bytes
    assert missed("profile.valgrind_warm=true") < 0.1 * read_bytes
    l2 = missed("profile.valgrind_warm=true", "profile.valgrind_last_level=l2")
    assert abs(l2 - read_bytes) <= 0.2 * read_bytes


def test_valgrind_warm_driver_keeps_freed_memory() -> None:
    """Counted warm with ``profile.reuse_memory``, the driver's second forward gets the
    blocks the first freed (glibc told before the first), as the timing run's forwards do."""
    from pimbuild.targets.offload.counters.valgrind import driver_source

    signature = {"function": "forward", "args": [{"shape": [4], "dtype": "float32"}],
                 "outputs": [{"shape": [4], "dtype": "float32"}]}
    steady = driver_source(signature, warm=True, reuse=True)
    assert steady.index("mallopt(M_MMAP_MAX, 0);") < steady.index("_mlir_ciface_forward(&")
    assert "mallopt(M_TRIM_THRESHOLD, -1);" in steady
    assert "mallopt" not in driver_source(signature, warm=True, reuse=False)
    assert "mallopt" not in driver_source(signature, warm=False, reuse=True)


def _nest(ident: int, reads: dict[str, int], writes: dict[str, int]) -> dict:
    return {"id": ident, "source_op": "op", "reads": reads, "writes": writes}


def test_footprint_counts_compulsory_and_capacity_misses() -> None:
    """An LRU of whole buffers: a first read misses every line, a resident buffer none; the
    least recent buffer goes when the cache is full; a buffer as large as the cache streams
    through, and of the rest only what its nest reads in every outer iteration stays; warm
    counts the second forward."""
    kib = 1024
    stream = {**_nest(3, {"big": 16 * kib, "x": 4 * kib}, {"w": 64}),
              "outer_invariant_reads": ["x"]}  # as a matrix-vector product's vector
    nests = [_nest(0, {"x": 4 * kib}, {"y": 4 * kib}),         # x, y cold
             _nest(1, {"y": 4 * kib}, {"z": 4 * kib}),         # y resident; x evicted
             _nest(2, {"x": 4 * kib}, {"y": 4 * kib}),         # x missed again; z evicted
             stream,                                           # keeps x only
             _nest(4, {"x": 4 * kib, "y": 4 * kib, "w": 64}, {})]
    cold = footprint_counts(nests, capacity=8 * kib, line=64)
    assert [c["offcore_data_rd"] for c in cold.values()] == [64, 0, 64, 256, 65]
    assert [c["ll_write_misses"] for c in cold.values()] == [64, 64, 0, 1, 0]
    warm = footprint_counts(nests, capacity=8 * kib, line=64, warm=True)
    assert warm[0] == {"offcore_data_rd": 64,  # x went when nest 4 filled the cache
                       "ll_write_misses": 0}  # y is left by the first forward
    assert warm[3]["offcore_data_rd"] == 256  # streams in every forward
    assert sum(c["offcore_data_rd"] for c in
               footprint_counts(nests, capacity=1 << 20, line=64, warm=True).values()) == 0


def test_footprint_writes_of_a_line_just_read_hit() -> None:
    """y += x @ W and y += b on a y past the cache: each line of y is read just before it
    is written, so only the reads miss (valgrind, nn.Linear 1024 -> 4096 at 1024 rows, a
    2 MiB L2: 1,055 and 19 write misses of 262,144 lines); a nest that only writes y
    misses every line."""
    kib = 1024
    nests = [_nest(0, {"b": kib}, {"y": 64 * kib}),
             _nest(1, {"x": kib, "y": 64 * kib}, {"y": 64 * kib}),
             _nest(2, {"y": 64 * kib, "b": kib}, {"y": 64 * kib})]
    counts = footprint_counts(nests, capacity=32 * kib, line=64)
    assert [c["ll_write_misses"] for c in counts.values()] == [1024, 0, 0]
    # b goes with the stream of y each time
    assert [c["offcore_data_rd"] for c in counts.values()] == [16, 16 + 1024, 1024 + 16]


def test_footprint_rereads_what_the_outer_loop_does_not_address() -> None:
    """Four rows against a 16 KiB weight: with an 8 KiB cache each row streams the weight
    again (each pair, when two rows share each read); with 32 KiB it is read once."""
    kib = 1024
    gemm = {**_nest(0, {"w": 16 * kib, "x": kib}, {"y": kib}), "parallel_dims": [1, 4, 8],
            "outer_invariant_reads": ["w"]}
    small = footprint_counts([gemm], capacity=8 * kib, line=64)[0]["offcore_data_rd"]
    assert small == 4 * 256 + 16
    assert footprint_counts([gemm], capacity=32 * kib, line=64)[0]["offcore_data_rd"] == 272
    # Code generation jammed two rows (codegen.ROWS): the weight streams once per pair.
    paired = footprint_counts([{**gemm, "row_block": 2}], capacity=8 * kib, line=64)[0]
    assert paired["offcore_data_rd"] == 2 * 256 + 16


def test_footprint_rereads_x_per_block_of_columns_with_panels() -> None:
    """All 64 rows in one block, 64 columns in 4 blocks of 16 (packed panels): x (16 KiB)
    is read once per block of columns. With x past the cache, all of it again each block;
    with x in the cache but not with a block's share of W and y, what that share pushes
    past it; with room for both, once."""
    kib = 1024
    gemm = {**_nest(0, {"x": 16 * kib, "w": 16 * kib}, {"y": 16 * kib}),
            "parallel_dims": [64, 64], "row_block": 64, "column_block": 16,
            "outer_invariant_reads": ["w"], "next_invariant_reads": ["x"]}

    def n_rd(capacity: int) -> int:
        return footprint_counts([gemm], capacity=capacity, line=64)[0]["offcore_data_rd"]

    compulsory = 2 * 256
    assert n_rd(8 * kib) == compulsory + 3 * 256
    assert n_rd(18 * kib) == compulsory + 3 * (16 + 8 - 18) * kib // 64
    assert n_rd(32 * kib) == compulsory
    # without panels the rows' rule applies: one block of rows, nothing read again
    no_panels = {k: v for k, v in gemm.items() if k != "column_block"}
    assert footprint_counts([no_panels], capacity=8 * kib, line=64)[0][
        "offcore_data_rd"] == compulsory
    # a batch of such products (heads): which dimension holds the columns is not known
    # here, so nothing is read again, as before panels
    batched = {**gemm, "parallel_dims": [4, 64, 64]}
    assert footprint_counts([batched], capacity=8 * kib, line=64)[0][
        "offcore_data_rd"] == compulsory


def test_footprint_keeps_what_the_repeating_loop_reads_past_a_stream() -> None:
    """A GEMM streaming a weight as large as the cache keeps its activations resident when
    code generation runs all its rows in one block (the loop over weight rows repeats, and
    reads them each time; Mamba's output projection), not when it runs the rows outermost:
    the output that the next nest fills is found resident or not accordingly."""
    kib = 1024
    norm = _nest(0, {"u": 4 * kib}, {"x": 4 * kib})
    gemm = {**_nest(1, {"x": 4 * kib, "w": 32 * kib}, {"y": 2 * kib}),
            "parallel_dims": [4, 512], "outer_invariant_reads": ["w"],
            "next_invariant_reads": ["x"]}
    fill = _nest(2, {}, {"x": 4 * kib})  # bufferization reuses x's buffer for the output
    by_row = footprint_counts([norm, gemm, fill], capacity=16 * kib, line=64)
    assert by_row[2]["ll_write_misses"] == 64  # evicted by the stream
    block = footprint_counts([norm, {**gemm, "row_block": 4}, fill], capacity=16 * kib,
                             line=64)
    assert block[2]["ll_write_misses"] == 0
    jammed = footprint_counts([norm, {**gemm, "row_block": 2}, fill], capacity=16 * kib,
                              line=64)
    assert jammed[2]["ll_write_misses"] == 64  # the row loop still repeats


def test_footprint_tells_two_halves_of_one_buffer_apart() -> None:
    """A buffer read in halves by two nests (Mamba's in-projection output: its first half
    into the convolution, its second into the gate) misses again for the second half; the
    same half read twice, or the whole buffer after both halves, is resident."""
    kib = 1024
    first = {"0:16x64:128,1": 4 * kib}
    second = {"64:16x64:128,1": 4 * kib}

    def half(ident: int, view: dict[str, int]) -> dict:
        return {**_nest(ident, {"xz": 4 * kib}, {}), "read_views": {"xz": view}}

    nests = [half(0, first), half(1, second), half(2, first), _nest(3, {"xz": 8 * kib}, {})]
    counts = footprint_counts(nests, capacity=64 * kib, line=64)
    assert [c["offcore_data_rd"] for c in counts.values()] == [64, 64, 0, 0]
    # without the views, the second half passes for resident
    plain = [_nest(i, {"xz": 4 * kib}, {}) for i in range(2)]
    assert footprint_counts(plain, capacity=64 * kib, line=64)[1]["offcore_data_rd"] == 0


@pytest.mark.slow
@pytest.mark.parametrize(("overrides", "capacity"), [
    (["model=rmsnorm"], 44040192),  # icelake_sp's LLC
    (["model=mlp"], 44040192),
    # Four rows against 16 MB weights with the 1.25 MB L2 as the last level: re-read per row.
    (["model=mlp", "model.size.batch=4", "profile.valgrind_last_level=l2"], 1310720),
])
def test_footprint_counts_follow_valgrind(run_build, overrides: list[str],
                                          capacity: int) -> None:
    """On one build, per nest, the modelled read and write misses are valgrind's within 10%
    (and a few lines), and the profile stage takes footprint when asked."""
    result = run_build([*overrides, "profile.backend=valgrind", "profile.repetitions=3",
                        "profile.warmup=1", "stages=[profile]", "platform=icelake_sp"])
    measured = {int(r["id"]): r for r in _csv(result, "profile", "counters.csv")}
    nests = nest_candidates(artifact_dir(result, "extract"), artifact_dir(result, "instrument"))
    modelled = footprint_counts(nests, capacity=capacity, line=64)
    for ident, row in measured.items():
        for role in ("offcore_data_rd", "ll_write_misses"):
            got, want = modelled[ident][role], int(row[f"event:{role}"])
            assert abs(got - want) <= 0.1 * want + 64, (ident, role, got, want)
    again = run_build([*overrides, "profile.backend=footprint", "profile.repetitions=3",
                       "profile.warmup=1", "stages=[profile]", "platform=icelake_sp"])
    rows = _csv(again, "profile", "counters.csv")
    assert {r["counter_source"] for r in rows} == {"footprint"}
    assert [int(r["event:offcore_data_rd"]) for r in rows] == [
        modelled[int(r["id"])]["offcore_data_rd"] for r in rows]
    assert _profile_json(again)["counter_backend"] == "footprint"


FREED_MEMORY_PROBE = """
import ctypes

import pytest
import torch

from pimbuild.targets.offload.profile import minor_faults, reuse_freed_memory

assert reuse_freed_memory().startswith("freed memory reused")
libc = ctypes.CDLL(None)
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
nbytes = 64 << 20


def touch() -> None:
    block = libc.malloc(nbytes)
    assert block
    ctypes.memset(block, 1, nbytes)
    libc.free(block)


def faults() -> int:
    touch()
    before = minor_faults()
    touch()
    return minor_faults() - before


assert faults() < nbytes // 4096 // 100, faults()
# a request PyTorch cannot meet moves a thread to another arena, unless there is one
with pytest.raises(RuntimeError, match="can't allocate memory"):
    torch.empty(10**15)
assert faults() < nbytes // 4096 // 100, faults()
"""


def test_freed_memory_is_reused_without_page_faults() -> None:
    """After ``reuse_freed_memory`` a block past glibc's largest mmap threshold (32 MiB),
    freed and asked for again, comes back without a page fault per page (else 16,384). In a
    process of its own: the allocator's state is process-wide, and a request an earlier test
    made that glibc could not meet leaves the thread on an arena that maps large blocks."""
    proc = subprocess.run([sys.executable, "-c", FREED_MEMORY_PROBE], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_memory_state_says_whether_the_allocator_was_changed(monkeypatch) -> None:
    from pimbuild.targets.offload import profile

    monkeypatch.setattr(profile, "_reused", [])
    assert profile.memory_state(False) == "not changed by this stage"
    monkeypatch.setattr(profile, "_reused", ["freed memory reused (x)"])
    assert profile.memory_state(False) == ("not changed by this stage; an earlier build in "
                                           "this process: freed memory reused (x)")


@pytest.mark.slow
def test_profile_records_the_allocator_and_page_faults(run_build) -> None:
    base = ["model=relu", "model.size.n=4096", "profile.backend=timer", "stages=[profile]"]
    info = _profile_json(run_build(base))
    assert info["memory"].startswith("freed memory reused")
    assert info["minor_faults_per_forward"] >= 0
    off = _profile_json(run_build([*base, "profile.reuse_memory=false"]))
    assert off["memory"] == ("not changed by this stage; an earlier build in this process: "
                             + info["memory"])


@pytest.mark.parametrize(("cpuinfo", "expected"), [
    ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 26\nmodel\t\t: 2\n"
     "model name\t: AMD EPYC\n\nprocessor\t: 1\ncpu family\t: 25\n",
     "AMD EPYC (family 26, model 2)"),
    ("processor\t: 0\nmodel name\t: Intel(R) Xeon(R) Processor\n", "Intel(R) Xeon(R) Processor"),
])
def test_host_cpu_names_family_and_model(monkeypatch, cpuinfo: str, expected: str) -> None:
    # Zen 3 and Zen 5 VMs both say "AMD EPYC": their measurements must not share a key.
    from pimbuild.targets.offload import profile

    real = Path.read_text
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: cpuinfo
                        if str(self) == "/proc/cpuinfo" else real(self, *a, **k))
    assert profile.host_cpu() == expected
