"""The heterogeneous-GPU target: kernels, the dependency graph, the cost model, exact planners
and the pipeline end to end (docs/design.md §10)."""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from pimbuild.codegen.runtime import compiler
from pimbuild.core.errors import ConfigError, StageError
from pimbuild.targets.gpus.costmodel import cost, ddg, roofline
from pimbuild.targets.gpus.costmodel.cost import Link
from pimbuild.targets.gpus.costmodel.ddg import Graph, Kernel
from pimbuild.targets.gpus.planners import PlanContext, place, throughput
from pimbuild.targets.gpus.systems.devicesets import two_sets
from pimbuild.targets.gpus.target import GpuTarget
from tests.conftest import REPO, artifact_dir, make_cfg

GPUS = ["system=gpus", "devices=[a100,l40s]"]
LINK = Link(200, 5.0)


def random_graph(rng: random.Random, n: int, carried: bool) -> Graph:
    """A random DAG in program order: each kernel reads one or two earlier results and
    sometimes the input; the last result is the output or carried to the next layer."""
    kernels, producer, readers, sizes = [], {}, {}, {"in": 4096}
    for k in range(n):
        earlier = sorted(producer)
        reads = {b: sizes[b] for b in rng.sample(earlier, min(len(earlier), rng.randint(1, 2)))}
        if k == 0 or rng.random() < 0.2:
            reads["in"] = sizes["in"]
        out = f"k{k}"
        sizes[out] = rng.choice([1024, 65536, 1 << 20, 8 << 20])
        if carried and k == n - 1:
            sizes[out] = sizes["in"]  # a carried result has the shape of the input it feeds
        kernels.append(Kernel(k, out, "elementwise", 0, reads, {out: sizes[out]}))
        for b in reads:
            readers.setdefault(b, []).append(k)
        producer[out] = k
    last = f"k{n - 1}"
    return Graph(tuple(kernels), sizes, producer, {b: tuple(r) for b, r in readers.items()},
                 ("in",), () if carried else (last,), {"in": last} if carried else {})


def brute_force(g: Graph, times, n_dev: int, kappa: float) -> tuple[float, float]:
    every = [list(p) for p in itertools.product(range(n_dev), repeat=len(g.kernels))]
    return (min(cost.cycle_time(g, p, times, LINK, n_dev, kappa) for p in every),
            min(cost.critical_path(g, p, times, LINK, n_dev) for p in every))


CASES = [(seed, n, n_dev) for seed, (n, n_dev) in enumerate(
    [(3, 2), (6, 2), (9, 2), (11, 2), (12, 2), (14, 2), (4, 3), (6, 3), (7, 3)])]


@pytest.mark.parametrize(("seed", "n", "n_dev"), CASES)
def test_planners_equal_brute_force(seed: int, n: int, n_dev: int) -> None:
    rng = random.Random(seed)
    g = random_graph(rng, n, carried=seed % 2 == 0)
    times = [[rng.choice([1e-6, 1e-5, 1e-4, 1e-3]) * rng.uniform(0.5, 2) for _ in range(n_dev)]
             for _ in range(n)]
    kappa = (0.0, 0.5, 1.0)[seed % 3]
    best_cycle, best_path = brute_force(g, times, n_dev, kappa)
    ctx = PlanContext(g, times, LINK, n_dev, kappa)
    thr, lat = place("throughput", ctx), place("latency", ctx)
    assert cost.cycle_time(g, thr.place, times, LINK, n_dev, kappa) == \
        pytest.approx(best_cycle, rel=1e-7)
    assert thr.objective == pytest.approx(best_cycle, rel=1e-6)
    assert cost.critical_path(g, lat.place, times, LINK, n_dev) == \
        pytest.approx(best_path, rel=1e-7)
    assert lat.objective == pytest.approx(best_path, rel=1e-6)


@pytest.mark.parametrize("n_dev", [2, 3])
def test_balanced_then_per_kernel_where_a_link_binds_equal_brute_force(n_dev: int) -> None:
    """The throughput MILP is first solved with the largest busy time as the mean plus the
    largest excess over it and no link rows (``throughput.balanced``); where a link's load is
    then the cycle time, the full MILP runs from its placement. Both ways end at brute
    force's optimum, and these cases take both."""
    ways, n = set(), (8, 6)[n_dev - 2]
    for seed in range(24):
        rng = random.Random(seed)
        g = random_graph(rng, n, carried=seed % 2 == 0)
        times = [[rng.choice([1e-7, 1e-6, 1e-5]) * rng.uniform(0.5, 2) for _ in range(n_dev)]
                 for _ in range(n)]
        kappa = (0.0, 0.5)[seed % 2]
        ctx = PlanContext(g, times, LINK, n_dev, kappa)
        ways.add(throughput.balanced(ctx)[1])
        plan = throughput.per_kernel(ctx)
        best, _ = brute_force(g, times, n_dev, kappa)
        achieved = cost.cycle_time(g, plan.place, times, LINK, n_dev, kappa)
        assert achieved == pytest.approx(best, rel=1e-7)
        assert plan.objective == pytest.approx(best, rel=1e-7)
        assert plan.info["bound_s"] <= best * (1 + 1e-6)
    assert ways == {True, False}


def _two_readers() -> Graph:
    a = Kernel(0, "a", "elementwise", 0, {"in": 4}, {"x": 1000})
    b = Kernel(1, "b", "elementwise", 0, {"x": 1000}, {"y": 8})
    c = Kernel(2, "c", "elementwise", 0, {"x": 1000, "y": 8}, {"z": 8})
    return Graph((a, b, c), {"in": 4, "x": 1000, "y": 8, "z": 8},
                 {"x": 0, "y": 1, "z": 2}, {"in": (0,), "x": (1, 2), "y": (2,)}, ("in",),
                 ("z",))


def test_a_buffer_moves_once_per_receiving_device() -> None:
    g = _two_readers()
    assert ddg.transfers(g, [0, 1, 1]) == [("x", 0, 1, 1000), ("z", 1, 0, 8)]
    assert ddg.transfers(g, [1, 1, 1]) == [("in", 0, 1, 4), ("z", 1, 0, 8)]
    assert ddg.transfers(g, [0, 0, 0]) == []


def test_cost_model_by_hand() -> None:
    g = _two_readers()
    times = [[1e-3, 2e-3], [1e-3, 5e-4], [1e-3, 5e-4]]
    t_x, t_z = LINK.seconds(1000), LINK.seconds(8)
    # device 1 computes b and c (1 ms) and receives x and sends z; device 0 computes a.
    assert cost.cycle_time(g, [0, 1, 1], times, LINK, 2, 1.0) == \
        pytest.approx(1e-3 + t_x + t_z)
    assert cost.cycle_time(g, [0, 1, 1], times, LINK, 2, 0.0) == pytest.approx(1e-3)
    assert cost.critical_path(g, [0, 1, 1], times, LINK, 2) == \
        pytest.approx(1e-3 + t_x + 1e-3 + t_z)


def _target(tmp_path, *over: str) -> GpuTarget:
    return GpuTarget.from_config(make_cfg(tmp_path, [*GPUS, *over]))


def test_roofline_engines_and_bounds(tmp_path) -> None:
    t = _target(tmp_path)
    a100 = t.devices[0]
    gemm = Kernel(0, "mm", "contraction", 2 * 4096**3, {"a": 2 * 4096**2, "b": 2 * 4096**2},
                  {"c": 2 * 4096**2})
    stream = Kernel(1, "add", "elementwise", 1 << 20, {"a": 4 << 20}, {"b": 4 << 20})
    assert roofline.engine(gemm, "bf16") == "tensor" and roofline.engine(gemm, "fp32") == "cuda"
    assert roofline.kernel_time(gemm, a100, t) == pytest.approx(
        2e-6 + 2 * 4096**3 / (312e12 * t.tensor_efficiency))
    assert roofline.kernel_time(stream, a100, t) == pytest.approx(
        2e-6 + (8 << 20) / (2039e9 * t.memory_efficiency))
    fp32 = _target(tmp_path, "gpus.precision=fp32")
    assert roofline.kernel_time(gemm, a100, fp32) > 10 * roofline.kernel_time(gemm, a100, t)


def test_unknown_device_lists_the_catalogue(tmp_path) -> None:
    with pytest.raises(ConfigError, match="not in the device catalogue.*a100"):
        _target(tmp_path, "devices=[a100,h200x]")
    with pytest.raises(ConfigError, match="devices is empty: name at least one device "
                                          r"\(choices: a100"):
        _target(tmp_path, "devices=[]")


def test_every_device_file_is_catalogued_and_the_cuda_backend_tells_them_apart(tmp_path
                                                                              ) -> None:
    """A device is one YAML file plus its catalogue line in pimbuild/conf/config.yaml: every
    file under
    pimbuild/conf/device composes into a target, and a GPU's name picks exactly the device it is (an
    H200 is not an H100, a 40 GB A100 not the 80 GB one, an RTX 3090 no catalogued device)."""
    from pimbuild.targets.gpus.program import cuda

    names = sorted(p.stem for p in (REPO / "pimbuild" / "conf" / "device").glob("*.yaml"))
    devices = {d.key: d for d in _target(tmp_path, f"devices=[{','.join(names)}]").devices}
    assert sorted(devices) == names
    for gpu, keys in (("NVIDIA H200", ["h200"]), ("NVIDIA H100 80GB HBM3", ["h100"]),
                      ("NVIDIA A100-SXM4-80GB", ["a100"]), ("NVIDIA L40S", ["l40s"]),
                      ("NVIDIA L4", ["l4"]), ("NVIDIA B200", ["b200"]),
                      ("NVIDIA RTX PRO 6000 Blackwell Server Edition", ["rtxpro6000"]),
                      ("NVIDIA A100-SXM4-40GB", []), ("NVIDIA GeForce RTX 4090", ["rtx4090"]),
                      ("NVIDIA GeForce RTX 3090", [])):
        assert [k for k, d in devices.items() if cuda.matches(d.name, gpu)] == keys, gpu


def test_device_numbers_are_validated(run_build) -> None:
    with pytest.raises(ConfigError, match=r"device.l40s: .mem_gbps. must be >= 0.001 \(got -1"):
        run_build([*GPUS, "model=relu", "device.l40s.mem_gbps=-1"])


def test_pipeline_end_to_end(run_build) -> None:
    result = run_build([*GPUS, "model=mlp"])
    assert set(result.executed) == {"lower", "extract", "profile", "decide", "reinsert",
                                    "simulate"}
    data = json.loads((artifact_dir(result, "extract") / "kernels.json").read_text())
    contractions = [k for k in data["kernels"] if k["kind"] == "contraction"]
    assert contractions and all(k["flops"] > 0 for k in contractions)
    report = json.loads((artifact_dir(result, "simulate") / "report.json").read_text())
    home_alone = report["baselines"]["a100 alone"]
    # Everything on the home device is one of the placements the MILP minimises over.
    assert report["planned"]["cycle_s"] <= home_alone["cycle_s"] * (1 + 1e-9)
    assert report["speedup_over"]["a100 alone"] >= 1 - 1e-9
    assert 0 <= report["fig2"]["share_by_count"] <= 1
    placement = json.loads((artifact_dir(result, "decide") / "placement.json").read_text())
    assert len(placement["place"]) == len(data["kernels"]) == report["kernels"]
    assert report["check"]["max_rel_error"] <= report["check"]["rtol"]
    assert report["check"]["program"] == "partition.o linked by each worker"
    behind = [k for k, v in report["speedup_over"].items() if v < 1]
    noted = [line for line in report["summary"] if "more throughput than the planned" in line]
    assert len(noted) == (1 if behind else 0) and all(k in noted[0] for k in behind)
    again = run_build([*GPUS, "model=mlp", "gpus.planner=latency"])
    assert set(again.executed) <= {"decide", "reinsert", "simulate"}
    assert "lower" not in again.executed and "profile" not in again.executed


def test_a_pim_policy_is_refused_as_a_planner(run_build) -> None:
    with pytest.raises(ConfigError, match="planner"):
        run_build([*GPUS, "model=relu", "gpus.planner=torchpim"])


def test_a_pim_stage_is_refused_on_gpus(run_build) -> None:
    with pytest.raises(ConfigError, match="stages of system=gpus are: lower, extract"):
        run_build([*GPUS, "model=relu", "stages=[instrument]"])


def test_cuda_backend_refuses_without_a_gpu(run_build) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: the refusal does not apply")
    with pytest.raises(StageError, match="needs a CUDA GPU"):
        run_build([*GPUS, "model=relu", "gpus.backend=cuda", "gpus.kernels=lowered"])
    with pytest.raises(ConfigError, match="add gpus.kernels=lowered"):
        run_build([*GPUS, "model=relu", "gpus.backend=cuda"])


def _partitioned(run_build, tmp_path, model: str):
    """A model's lowered program, its kernels and the compiled kernel functions."""
    from pimbuild import frontend
    from pimbuild.frontend.lower import model_params
    from pimbuild.targets.gpus import reinsert
    from pimbuild.targets.gpus.program import workers

    # the workers run the lowered kernels (an engine kernel's members go where it goes)
    result = run_build([*GPUS, f"model={model}", "gpus.kernels=lowered", "stages=[extract]"])
    lower, extract = artifact_dir(result, "lower"), artifact_dir(result, "extract")
    signature = json.loads((lower / "signature.json").read_text())
    data = json.loads((extract / "kernels.json").read_text())
    out = tmp_path / "partition"
    out.mkdir()
    specs = reinsert.compile_partition(lower, out, tmp_path / "failure")
    cfg = make_cfg(tmp_path / "s", [*GPUS, f"model={model}"])
    args, expected = frontend.materialize(model_params(cfg), signature)

    def run(place, moves, compiled: Path | None = None):
        """The max relative error of the partitioned run: each worker compiles the LLVM
        dialect, or (``compiled``) links that object file."""
        graph = ddg.build(data, layers=0)
        got = workers.run(out / "partition_llvm.mlir", specs, place, moves,
                          workers.buffer_table(specs, signature),
                          {f"arg{i}": a for i, a in enumerate(args)}, set(graph.inputs),
                          data["outputs"], 2,
                          compiled=(compiled, compiler()) if compiled else None)
        return reinsert.check(got, expected, signature)["max_rel_error"]
    return data, run


@pytest.mark.slow
def test_partitioned_program_runs_on_two_processes_and_a_dropped_edge_fails(
        run_build, tmp_path) -> None:
    """Kernels alternate between two worker processes; the exchange of exactly the graph's
    transfers reproduces eager, and leaving out any one transfer does not."""
    from pimbuild.core.check import RTOL

    data, run = _partitioned(run_build, tmp_path, "attention")
    place = [k % 2 for k in range(len(data["kernels"]))]
    moves = ddg.transfers(ddg.build(data, layers=0), place)
    assert len(moves) >= 3
    assert run(place, moves) <= RTOL
    for dropped in (0, len(moves) // 2):
        assert run(place, moves[:dropped] + moves[dropped + 1:]) > RTOL
    # The object file reinsert compiles once for every worker to link, the same kernels.
    partition = tmp_path / "partition"
    assert run(place, moves, partition / "partition.o") <= RTOL
    assert run(place, moves[1:], partition / "partition.o") > RTOL
    # A transfer from a device that never has the buffer is refused before any worker
    # starts (it would wait for it), not a run that hangs.
    b, src, dst, size = next(m for m in moves if m[0] not in data["outputs"])
    with pytest.raises(StageError, match=rf"transfer\(s\) that no worker sends, e.g. {b} "):
        run(place, [*moves, (b, dst, src, size)])  # back from where it was received


def test_every_argument_but_the_inputs_is_on_every_device() -> None:
    """Parameters, buffers and tensor constants the export lifted (``constant_tensor``) are
    replicated, as the workers hold them: a kernel on another device reads them with no
    transfer; the forward's inputs come from home."""
    data = {"kernels": [
        {"id": 0, "kind": "elementwise", "flops": 1, "reads": {"arg0": 4}, "writes":
         {"k0.0": 4}, "source_module": "", "op": "linalg.generic"},
        {"id": 1, "kind": "elementwise", "flops": 1,
         "reads": {"k0.0": 4, "arg1": 4, "arg2": 4, "arg3": 4}, "writes": {"k1.0": 4},
         "source_module": "", "op": "linalg.generic"}],
        "outputs": ["k1.0"], "buffers": {
            "arg0": {"bytes": 4, "role": "input"}, "arg1": {"bytes": 4, "role": "parameter"},
            "arg2": {"bytes": 4, "role": "constant_tensor"},
            "arg3": {"bytes": 4, "role": "buffer"},
            "k0.0": {"bytes": 4}, "k1.0": {"bytes": 4}}}
    g = ddg.build(data, layers=0)
    assert g.inputs == ("arg0",)
    assert {b for b, _, _, _ in ddg.transfers(g, [1, 1])} == {"arg0", "k1.0"}


def test_workers_compile_where_the_object_cannot_be_linked(tmp_path) -> None:
    from pimbuild.targets.gpus import reinsert

    bad = tmp_path / "partition.o"
    bad.write_text("not an object file\n")
    compiled, program = reinsert.linkable(bad)
    assert compiled is None
    assert program.startswith("partition_llvm.mlir compiled by each worker (OSError: ")


@pytest.fixture
def alternate():
    """A planner that puts kernel k on device k % 2, so that every graph has cut edges."""
    from pimbuild.targets.gpus.planners import PLANNERS, Plan

    PLANNERS.register("alternate", lambda ctx: Plan([k % ctx.n_dev for k in
                                                    range(len(ctx.graph.kernels))], 0.0))
    yield "alternate"
    PLANNERS.unregister("alternate")


@pytest.mark.parametrize("recipe", ["mixed_dtypes", "tensor_constant", "empty_output",
                                    "with_nan", "only_empty", "running_sum", "scatter_rows",
                                    "sorted_values", "output_slices", "cached_step",
                                    "nested_outputs", "tensor_literal", "constant_result",
                                    "topk_router", "scalar_outputs", "only_a_scalar",
                                    "triangular_det"])
def test_odd_models_run_partitioned(run_build, alternate: str, recipe: str) -> None:
    """Outputs of every dtype, NaN, empty tensors, constants, TMTensor ops and results that
    are slices of one tensor all go through the GPU pipeline split over two processes."""
    result = run_build([*GPUS, "model=relu", f"model.recipe=tests.odd_recipes:{recipe}",
                        "model.size={n:64}", f"gpus.planner={alternate}"])
    check = json.loads((artifact_dir(result, "reinsert") / "reinsert.json").read_text())
    assert check["max_rel_error"] <= check["rtol"]
    kernels = json.loads((artifact_dir(result, "extract") / "kernels.json").read_text())
    if len(kernels["kernels"]) > 1:
        assert check["transfers"] > 0


def test_a_forward_without_kernels_is_refused(run_build) -> None:
    with pytest.raises(StageError, match="launches no kernel"):
        run_build([*GPUS, "model=relu", "model.recipe=tests.odd_recipes:returns_input",
                   "model.size={n:64}"])


def test_serving_formulas_by_hand() -> None:
    from dataclasses import replace

    from pimbuild.targets.gpus.systems import closedform

    w = closedform.Workload(input_len=100, output_len=10, batch=4)
    # 4 prefills of 1 s and 10 decode steps of 0.5 s give 40 tokens in 9 s.
    assert closedform.mixed(w, 1.0, 0.5) == pytest.approx(40 / 9)
    link = Link(8.0, 0.0)  # 1 GB/s
    # Prefill 1 request/s, decode 4 / (10 x 0.5) = 0.8 requests/s, KV 0.5 GB: 2 requests/s.
    assert closedform.pd(w, [1.0], [0.5], 500_000_000, link) == pytest.approx(0.8 * 10)
    assert closedform.pd_bottleneck(w, [1.0], [0.5], 500_000_000, link) == "decode"
    assert closedform.pd_bottleneck(w, [1.0], [0.1], 4_000_000_000, link) == "KV transfer"
    # Two decode instances (the paper's 2 A100 + 1 L40S): 1.6 requests/s of decode, so the
    # one prefill device (1 request/s) bounds it; two prefill devices and one decode: the
    # one link a KV cache of 0.5 GB crosses at a time bounds it at 2 requests/s.
    assert closedform.pd(w, [1.0], [0.5, 0.5], 500_000_000, link) == pytest.approx(1.0 * 10)
    assert closedform.pd(w, [0.5, 0.5], [0.1], 500_000_000, link) == pytest.approx(2.0 * 10)
    assert closedform.pd_bottleneck(w, [0.5, 0.5], [0.1], 500_000_000, link) == "KV transfer"
    # compare's PD is the best split of the devices; one device has none
    phase = closedform.Phase(1.0, [1.0, 1.0, 2.0], None, 500_000_000)
    rows = closedform.compare(w, phase, replace(phase, alone=[0.5, 0.5, 0.5]),
                            ["a", "b", "c"], [1.0] * 3, link)
    # prefill on a (1/s), decode on b and c (0.8/s each): 1 request/s; prefill on a and b
    # leaves c's 0.8/s of decode; the slow c prefilling alone gives 0.5/s
    assert rows["PD disaggregation"]["tokens_per_s"] == pytest.approx(1.0 * 10)
    assert (rows["PD disaggregation"]["prefill_on"],
            rows["PD disaggregation"]["decode_on"]) == ("a", "b+c")
    # the simulation's splits best first: PD on ([0], [1, 2]) first, ([2], [0, 1]) (the
    # slow c prefilling alone at 0.5/s) last of the single-prefill splits; no AF
    pd_order, af_order = closedform.ranked(w, phase, replace(phase, alone=[0.5, 0.5, 0.5]),
                                         link)
    sets = two_sets(3)
    assert sets[pd_order[0]] == ([0], [1, 2]) and af_order == []
    assert sorted(pd_order) == list(range(6))
    assert pd_order.index(sets.index(([2], [0, 1]))) > pd_order.index(sets.index(([1], [0, 2])))
    one = closedform.compare(w, closedform.Phase(1.0, [1.0], None, 0), closedform.Phase(
        0.5, [0.5], None, 0), ["a"], [1.0], link)
    assert set(one) == {"planned", "a alone", "request distribution"}


def test_the_same_device_twice_gets_two_labels(tmp_path) -> None:
    t = _target(tmp_path, "devices=[a100,a100,l40s]")
    assert [d.key for d in t.devices] == ["a100#1", "a100#2", "l40s"]


@pytest.mark.parametrize("carried", [True, False])
def test_identical_layers_unrolled_cost_what_one_layer_costs_each(carried: bool) -> None:
    """A placement repeated over unrolled layers costs layers x one layer's cycle time; a
    layer's result that is not carried (a prefill's KV cache) travels home from every copy,
    and an input every layer reads from home (not carried) is sent once to each device."""
    rng = random.Random(7)
    g = random_graph(rng, 6, carried=carried)
    times = [[rng.uniform(1e-5, 1e-4) for _ in range(2)] for _ in range(6)]
    three = ddg.unroll(g, 3)
    for place_one in ([rng.randrange(2) for _ in range(6)], [1] * 6):
        one = cost.loads(g, place_one, times, LINK, 2, 1.0)
        loads = cost.loads(three, place_one * 3, times * 3, LINK, 2, 1.0)
        shared = 0.0 if carried else 2 * LINK.seconds(g.buffer_bytes["in"])  # sent once
        assert loads["busy"][1] == pytest.approx(3 * one["busy"][1] - shared)
    assert three.outputs == (() if carried else ("L0:k5", "L1:k5", "L2:k5"))


def layer_graph(rng: random.Random, n: int, carried: bool = True) -> Graph:
    """One layer of a stack: a random DAG that reads the hidden state ``h`` (carried from
    the layer before's last result, or from home), a table ``pos`` every layer reads from
    home, and its own state ``kv`` (written by kernel 0 in the forward before); sometimes a
    result goes home."""
    sizes = {"h": 4096, "pos": rng.choice([256, 1 << 20]), "kv": rng.choice([1024, 1 << 20])}
    kernels, producer, readers = [], {}, {}
    for k in range(n):
        earlier = sorted(producer)
        reads = {b: sizes[b] for b in rng.sample(earlier, min(len(earlier), rng.randint(1, 2)))}
        for b, p in (("h", 0.3), ("pos", 0.3), ("kv", 0.2)):
            if (k == 0 and b == "h") or (k == 1 and b == "kv") or rng.random() < p:
                reads[b] = sizes[b]
        out = f"k{k}"
        sizes[out] = 4096 if k == n - 1 else rng.choice([1024, 65536, 1 << 20, 8 << 20])
        kernels.append(Kernel(k, out, "elementwise", 0, reads, {out: sizes[out]}))
        for b in reads:
            readers.setdefault(b, []).append(k)
        producer[out] = k
    home = (f"k{rng.randrange(1, n - 1)}",) if rng.random() < 0.5 else ()
    carry = {"kv": "k0", **({"h": f"k{n - 1}"} if carried else {})}
    return Graph(tuple(kernels), sizes, producer, {b: tuple(r) for b, r in readers.items()},
                 ("h", "pos", "kv"), home + (() if carried else (f"k{n - 1}",)), carry,
                 frozenset({"kv"}))


def layer_times(rng: random.Random, n: int, slower: bool) -> list[list[float]]:
    """Random times; ``slower``: the second device is 1-3x slower on every kernel."""
    first = [rng.choice([1e-6, 1e-5, 1e-4]) * rng.uniform(0.5, 2) for _ in range(n)]
    return [[t, t * rng.uniform(1, 3) if slower else rng.choice([1e-6, 1e-5, 1e-4])]
            for t in first]


@pytest.mark.parametrize("seed", range(12))
def test_identical_layers_aggregated_equal_brute_force(seed: int) -> None:
    """A period of identical layers on two devices is solved with the layers counted, not
    placed (``planners._layers``): its optimum is brute force's over the unrolled graph,
    whether every layer's result stays on one device or the period alternates, and the
    placement returned costs what the planner reports."""
    from pimbuild.targets.gpus.planners import unrolled

    rng = random.Random(seed)
    n, period = (3, 4) if seed % 2 else (4, 3)
    g = layer_graph(rng, n, carried=seed % 6 != 5)
    kappa = (0.0, 0.5, 1.0)[seed % 3]
    ctx = unrolled(PlanContext(g, layer_times(rng, n, seed % 4 < 2), LINK, 2, kappa), period)
    plan = place("throughput", ctx)
    assert "aggregated" in plan.info["formulation"]
    every = (list(p) for p in itertools.product(range(2), repeat=n * period))
    best = min(cost.cycle_time(ctx.graph, p, ctx.times, LINK, 2, kappa) for p in every)
    assert plan.objective == pytest.approx(best, rel=1e-7)
    assert cost.cycle_time(ctx.graph, plan.place, ctx.times, LINK, 2, kappa) == \
        pytest.approx(plan.objective, rel=1e-12)
    assert plan.info["bound_s"] == pytest.approx(best, rel=1e-6)


def test_layers_aggregated_equal_the_per_kernel_milp_and_alternate() -> None:
    """On larger periods the aggregated MILP equals the per-kernel one; where the second
    device is slower on every kernel, the optimum needs layers whose results end on each
    device, in an order where every layer reads the hidden state where the one before left
    it (the cost model charges any other order)."""
    from pimbuild.targets.gpus.planners import throughput, unrolled

    alternating = 0
    for seed in range(6):
        rng = random.Random(100 + seed)
        g = layer_graph(rng, 6)
        ctx = unrolled(PlanContext(g, layer_times(rng, 6, True), LINK, 2, 1.0), 5)
        ours, theirs = throughput.place(ctx), throughput.per_kernel(ctx)
        assert ours.objective == pytest.approx(theirs.objective, rel=1e-7)
        alternating += len({ours.place[i * 6 + 5] for i in range(5)}) == 2
    assert alternating >= 2


def two_streams(rng: random.Random, n: int) -> Graph:
    """One layer carrying two streams written by two kernels (an MMDiT block's image and
    text streams): ``h`` from the last kernel, ``c`` from the one before it; neither is read
    in its own layer. A table every layer reads from home, sometimes a result home."""
    sizes = {"h": 4096, "c": rng.choice([1024, 1 << 20]), "pos": rng.choice([256, 1 << 20])}
    kernels, producer, readers = [], {}, {}
    for k in range(n):
        inner = sorted(b for b, p in producer.items() if p < n - 2)
        reads = {b: sizes[b] for b in rng.sample(inner, min(len(inner), rng.randint(1, 2)))}
        for b, p in (("h", 0.3), ("c", 0.3), ("pos", 0.2)):
            if (k == 0 and b == "h") or (k == 1 and b == "c") or rng.random() < p:
                reads[b] = sizes[b]
        out = f"k{k}"
        sizes[out] = {n - 1: sizes["h"], n - 2: sizes["c"]}.get(
            k, rng.choice([1024, 65536, 1 << 20, 8 << 20]))
        kernels.append(Kernel(k, out, "elementwise", 0, reads, {out: sizes[out]}))
        for b in reads:
            readers.setdefault(b, []).append(k)
        producer[out] = k
    home = (f"k{rng.randrange(n - 2)}",) if rng.random() < 0.5 else ()
    return Graph(tuple(kernels), sizes, producer, {b: tuple(r) for b, r in readers.items()},
                 ("h", "c", "pos"), home, {"h": f"k{n - 1}", "c": f"k{n - 2}"})


@pytest.mark.parametrize("seed", range(12))
def test_two_carried_streams_counted_equal_brute_force(seed: int) -> None:
    """Two streams carried from two kernels: the layers are counted in cases where one
    stream changes device and the other stays, and where both stay; the best of those is
    brute force's over those periods. The per-kernel MILP then starts from it for the
    periods where both change: the optimum is brute force's over the unrolled graph, the
    placement returned costs what the planner reports, and the bound meets it."""
    from pimbuild.core.milp import US
    from pimbuild.targets.gpus.planners import _layers, unrolled

    rng = random.Random(seed)
    n, period = [(3, 4), (4, 3), (3, 3), (5, 2)][seed % 4]
    g = two_streams(rng, n)
    kappa = (0.0, 0.5, 1.0)[seed % 3]
    ctx = unrolled(PlanContext(g, layer_times(rng, n, seed % 4 < 2), LINK, 2, kappa), period)
    plan = place("throughput", ctx)
    assert "then per kernel" in plan.info["formulation"]
    every = [list(p) for p in itertools.product(range(2), repeat=n * period)]
    cycle = [cost.cycle_time(ctx.graph, p, ctx.times, LINK, 2, kappa) for p in every]
    assert plan.objective == pytest.approx(min(cycle), rel=1e-7)
    assert cost.cycle_time(ctx.graph, plan.place, ctx.times, LINK, 2, kappa) == \
        pytest.approx(plan.objective, rel=1e-12)
    assert plan.info["bound_s"] == pytest.approx(min(cycle), rel=1e-6)

    def changes(p: list[int], w: int) -> bool:
        return len({p[i * n + w] for i in range(period)}) == 2

    one = [c for p, c in zip(every, cycle, strict=True)
           if not (changes(p, n - 1) and changes(p, n - 2))]
    counted = []
    for spec in _layers.cases(period, [n - 2, n - 1]):
        m, groups = _layers.model(ctx, _layers.buffers(g, ctx), spec)
        values, objective, _, _ = m.solve()
        placed = _layers.period(groups, values)
        assert cost.cycle_time(ctx.graph, placed, ctx.times, LINK, 2, kappa) == \
            pytest.approx(objective / US, rel=1e-9)
        counted.append(objective / US)
    assert min(counted) == pytest.approx(min(one), rel=1e-7)


def test_layers_are_placed_per_kernel_where_counting_them_would_not_be_exact() -> None:
    """Three devices, or a carried result that its own layer also reads: the per-kernel
    MILP."""
    from pimbuild.targets.gpus.planners import unrolled

    rng = random.Random(5)
    g = layer_graph(rng, 4)
    three = unrolled(PlanContext(g, [[1e-5, 2e-5, 3e-5]] * 4, LINK, 3, 1.0), 2)
    assert "formulation" not in place("throughput", three).info
    read = Kernel(4, "k4", "elementwise", 0, {"k3": 4096}, {"k4": 64})
    g2 = Graph(g.kernels + (read,), {**g.buffer_bytes, "k4": 64}, {**g.producer, "k4": 4},
               {**g.readers, "k3": (4,)}, g.inputs, ("k4",), g.carry, g.state)
    ctx = unrolled(PlanContext(g2, [[1e-5, 2e-5]] * 5, LINK, 2, 1.0), 2)
    plan = place("throughput", ctx)
    assert "formulation" not in plan.info
    every = (list(p) for p in itertools.product(range(2), repeat=10))
    assert plan.objective == pytest.approx(
        min(cost.cycle_time(ctx.graph, p, ctx.times, LINK, 2, 1.0) for p in every), rel=1e-7)


@pytest.mark.parametrize("streams", [1, 2])
def test_counted_layers_out_of_time_keep_the_start_or_fail(streams: int) -> None:
    """The counted layers' MILPs (with two streams, and the per-kernel MILP after them)
    share the planner's time limit; out of time with nothing found they return the start
    (``incumbent``) with no bound, or fail."""
    from dataclasses import replace

    from pimbuild.targets.gpus.planners import unrolled

    rng = random.Random(9)
    g = layer_graph(rng, 5) if streams == 1 else two_streams(rng, 5)
    ctx = unrolled(PlanContext(g, layer_times(rng, 5, True), LINK, 2, 1.0), 6)
    start = tuple([0] * 30)
    plan = place("throughput", replace(ctx, time_limit_s=0.0, incumbent=True, start=start))
    assert plan.place == list(start)
    assert plan.info["solver_status"] == "Time limit reached" and plan.info["gap"] == 1.0
    with pytest.raises(RuntimeError, match="Time limit"):
        place("throughput", replace(ctx, time_limit_s=0.0, start=start))


def test_the_monitors_other_placement_over_a_period_is_one_layers_repeated() -> None:
    """The online monitor's latency placement for a throughput period: the latency planner
    on one layer (``one_layer`` undoes ``unrolled``), repeated over the period."""
    from pimbuild.targets.gpus.planners import one_layer, unrolled
    from pimbuild.targets.gpus.systems import serving_systems

    rng = random.Random(11)
    one = PlanContext(layer_graph(rng, 6), layer_times(rng, 6, True), LINK, 2, 1.0)
    ctx = unrolled(one, 8)
    back = one_layer(ctx)
    assert (back.graph, back.times, back.period, back.layer) == (one.graph, one.times, 1, None)
    planned = place("throughput", ctx).place
    alt = serving_systems.alternative("latency", ctx, planned)
    assert alt == alt[:6] * 8
    best = place("latency", one).objective
    assert cost.critical_path(one.graph, alt[:6], one.times, LINK, 2) == pytest.approx(best)
    alone = serving_systems.alternative("latency", one, planned[:6])
    assert cost.critical_path(one.graph, alone, one.times, LINK, 2) == pytest.approx(best)


def test_a_period_of_layers_contains_the_layer_pipeline() -> None:
    """Planned over the model's layers (``gpus.period`` = layers), the throughput MILP's
    cycle per layer is at most the layer pipeline's and one layer's placement reused: both
    are placements of the unrolled graph. With the second device 2.5x slower on every kernel
    one layer's placement has only load balance to trade against transfers; whole layers
    balance it cheaply, and the period finds that."""
    from pimbuild.targets.gpus.systems import baselines

    rng = random.Random(3)
    g = random_graph(rng, 5, carried=True)
    times = [[t, 2.5 * t] for t in (rng.uniform(1e-5, 1e-4) for _ in range(5))]
    devices = [type("D", (), {"key": k, "price_per_hour": 1.0})() for k in ("fast", "slow")]
    one = PlanContext(g, times, LINK, 2, 1.0)
    pipeline = baselines.layer_pipeline(one, devices, baselines.Unit(7, 1, "tokens", 1), 2.0)
    whole = place("throughput", PlanContext(ddg.unroll(g, 7), times * 7, LINK, 2, 1.0))
    reused = place("throughput", one)
    assert whole.objective / 7 <= pipeline["cycle_s"] * (1 + 1e-9)
    assert whole.objective / 7 <= reused.objective * (1 + 1e-9)
    assert whole.objective / 7 < reused.objective * 0.99  # strictly better here


def test_unrolled_layers_keep_their_own_state(tmp_path) -> None:
    """Each unrolled layer's state (a KV-cache delta) comes from its own result of the
    previous forward, not from the layer before it: placing one layer's state writer and
    reader on different devices costs each layer the same transfer."""
    k = [Kernel(0, "attn", "elementwise", 0, {"h": 4096, "kv": 1 << 20}, {"a": 4096}),
         Kernel(1, "ffn", "elementwise", 0, {"a": 4096}, {"h_out": 4096}),
         Kernel(2, "cache", "elementwise", 0, {"a": 4096}, {"kv_new": 1 << 20})]
    g = Graph(tuple(k), {"h": 4096, "kv": 1 << 20, "a": 4096, "h_out": 4096,
                         "kv_new": 1 << 20}, {"a": 0, "h_out": 1, "kv_new": 2},
              {"h": (0,), "kv": (0,), "a": (1, 2)}, ("h", "kv"), (),
              {"h": "h_out", "kv": "kv_new"}, frozenset({"kv"}))
    three = ddg.unroll(g, 3)
    assert three.state == {"L0:kv", "L1:kv", "L2:kv"}
    assert {three.source(f"L{i}:kv") for i in range(3)} == {2, 5, 8}  # its own writer
    assert three.kernels[3].reads.keys() == {"L0:h_out", "L1:kv"}  # carried, its own state
    times = [[1e-5, 1e-5]] * 3
    for where in ([0, 0, 1], [1, 0, 0], [0, 1, 1]):
        assert cost.cycle_time(three, where * 3, times * 3, LINK, 2, 1.0) == \
            pytest.approx(3 * cost.cycle_time(g, where, times, LINK, 2, 1.0))


def test_layer_pipeline_splits_whole_layers() -> None:
    """The layer-pipeline baseline: with a free link its cycle is the busier device's share
    of whole layers (the best split, computed by hand here); with a real one each boundary's
    carried buffer costs both devices; it never beats request distribution; one layer has
    none; on three devices it may use all three."""
    from pimbuild.targets.gpus.systems import baselines

    rng = random.Random(3)
    g = random_graph(rng, 5, carried=True)
    times = [[rng.uniform(1e-5, 1e-4), 0.0] for _ in range(5)]
    for row in times:
        row[1] = 2.5 * row[0]  # the second device 2.5x slower on every kernel
    t0, t1 = sum(r[0] for r in times), sum(r[1] for r in times)
    devices = [type("D", (), {"key": k, "price_per_hour": 1.0})() for k in ("fast", "slow")]
    unit = baselines.Unit(7, 1, "tokens", 1)
    free = PlanContext(g, times, Link(1e12, 0.0), 2, 1.0)
    pp = baselines.layer_pipeline(free, devices, unit, 2.0)
    by_hand = min(max(m * t0, (7 - m) * t1) for m in range(1, 7))  # 5 layers fast, 2 slow
    assert pp["cycle_s"] * 7 == pytest.approx(by_hand)
    assert pp["layers_on"] == {"fast": 5, "slow": 2}
    assert pp["throughput"] == pytest.approx(1 / by_hand)
    real = baselines.layer_pipeline(PlanContext(g, times, LINK, 2, 1.0), devices, unit, 2.0)
    hop = LINK.seconds(g.buffer_bytes["in"])  # the hidden state over the split, and back
    assert real["cycle_s"] * 7 == pytest.approx(max(5 * t0, 2 * t1) + 2 * hop)
    base = baselines.baselines(PlanContext(g, times, LINK, 2, 1.0), devices, unit)
    assert base["layer pipeline"]["throughput"] <= base["request distribution"]["throughput"]
    assert baselines.layer_pipeline(free, devices, baselines.Unit(1, 1, "tokens", 1), 2.0) is None
    # A third device as fast as the first: three segments beat any two (4 layers on one).
    three = PlanContext(g, [r + [r[0]] for r in times], Link(1e12, 0.0), 3, 1.0)
    twin = type("D", (), {"key": "fast2", "price_per_hour": 1.0})()
    pp3 = baselines.layer_pipeline(three, devices + [twin], unit, 3.0)
    assert pp3["cycle_s"] * 7 == pytest.approx(3 * t0)  # 3 + 3 fast, 1 slow (2.5 t0)
    assert sorted(pp3["layers_on"].items()) == [("fast", 3), ("fast2", 3), ("slow", 1)]


@pytest.mark.parametrize("seed", range(8))
def test_a_splits_loads_summed_per_segment_equal_the_unrolled_graphs(seed: int) -> None:
    """``pipeline.best`` sums one layer per segment and each further layer's increment
    instead of costing the unrolled graph: the sum equals the unrolled graph's cycle time on
    every split (two to four devices, carried or not, with a state every layer keeps and an
    input every layer reads from home), and its best is the least of them."""
    from pimbuild.targets.gpus.planners import unrolled
    from pimbuild.targets.gpus.systems import pipeline

    rng = random.Random(seed)
    g = random_graph(rng, rng.randint(3, 6), carried=seed % 2 == 0)
    k = len(g.kernels)  # a kernel that keeps a state of its own and reads a table from home
    g = Graph(g.kernels + (Kernel(k, "cache", "elementwise", 0,
                                  {"kv": 1 << 16, "rope": 512, f"k{k - 1}": 1024},
                                  {"kv_new": 1 << 16}),),
              {**g.buffer_bytes, "kv": 1 << 16, "kv_new": 1 << 16, "rope": 512, f"k{k - 1}":
               g.buffer_bytes[f"k{k - 1}"]},
              {**g.producer, "kv_new": k},
              {**g.readers, "kv": (k,), "rope": (k,), f"k{k - 1}": g.readers.get(f"k{k - 1}",
                                                                                 ()) + (k,)},
              g.inputs + ("kv", "rope"), g.outputs, {**g.carry, "kv": "kv_new"},
              frozenset({"kv"}))
    n_dev, layers = 2 + seed % 3, rng.randint(2, 6)
    times = [[rng.uniform(1e-6, 1e-4) for _ in range(n_dev)] for _ in g.kernels]
    one = PlanContext(g, times, LINK, n_dev, rng.choice([0.0, 1.0]))
    whole = unrolled(one, layers)
    every = list(pipeline.cycles(one, layers))
    for split in every:
        place = split.place(len(g.kernels))
        assert split.cycle_s == pytest.approx(cost.cycle_time(
            whole.graph, place, whole.times, LINK, n_dev, one.comm_on_device), rel=1e-12)
    assert pipeline.best(one, layers).cycle_s == min(s.cycle_s for s in every)
    assert len(every) == sum(len(list(itertools.permutations(range(n_dev), s)))
                             * len(list(itertools.combinations(range(1, layers), s - 1)))
                             for s in range(2, min(n_dev, layers, pipeline.SEGMENTS) + 1))


def test_node_times_and_their_split_over_kernels(tmp_path) -> None:
    """The cuda backend's pieces that do not need a GPU: timing the exported graph's nodes
    (here on the CPU) and charging them to kernels."""
    from pimbuild.frontend.lower import model_params
    from pimbuild.targets.gpus.program import cuda

    nodes, how = cuda.node_times(model_params(make_cfg(tmp_path, ["model=mlp"])), "cpu",
                                 repetitions=3, warmup=1, precision="bf16")
    assert how == {"measured_precision": "bf16", "event_floor_s": 0.0}
    assert nodes and all(t > 0 for t in nodes.values())
    assert any(name.startswith("linear") for name in nodes)
    ks = [Kernel(0, "a", "elementwise", 0, {}, {}, "", "mul"),
          Kernel(1, "b", "contraction", 0, {}, {}, "", "linear"),
          Kernel(2, "c", "contraction", 0, {}, {}, "", "linear")]
    # "view" has no kernel: fusion merged it into its consumer, the next node with kernels.
    got = cuda.split(ks, {"mul": 1.0, "view": 0.5, "linear": 3.0}, [9.0, 1.0, 3.0])
    assert got == pytest.approx([1.0, 0.875, 2.625])
    assert cuda.matches("H100-SXM", "NVIDIA H100 80GB HBM3")
    assert not cuda.matches("A100-80GB-SXM", "NVIDIA H100 80GB HBM3")


def test_the_served_precision_falls_back_to_fp32_where_the_graph_refuses_it() -> None:
    """A graph that fixes a dtype (an fp32 upcast multiplied by a parameter) cannot run with
    its parameters in bf16: the cuda backend times it in fp32 and says so."""
    import torch

    from pimbuild.targets.gpus.program import cuda

    class Upcast(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 4))

        def forward(self, x):
            return x.to(torch.float32) @ self.w

    class Plain(Upcast):
        def forward(self, x):
            return x @ self.w

    x = torch.randn(2, 4)
    for module, want in ((Upcast(), "fp32"), (Plain(), "bf16")):
        gm = torch.export.export(module, (x,), strict=False).module()
        gm, inputs, ran = cuda.served(gm, [x], "bf16")
        assert ran == want
        assert inputs[0].dtype == (torch.bfloat16 if want == "bf16" else torch.float32)
        gm(*inputs)


def test_a_failing_worker_is_one_stage_error(run_build, tmp_path) -> None:
    data, run = _partitioned(run_build, tmp_path, "mlp")
    from pimbuild.targets.gpus.program import workers

    def broken(*args, **kwargs):
        raise RuntimeError("kernel_0 is not in this engine")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(workers, "_worker", broken)
        with pytest.raises(StageError, match="a device worker failed: .*kernel_0"):
            run([0] * len(data["kernels"]), [])


def test_at_the_time_limit_the_best_placement_and_its_gap_or_an_error() -> None:
    rng = random.Random(7)
    g = random_graph(rng, 300, carried=True)
    times = [[rng.uniform(1e-5, 1e-4) for _ in range(3)] for _ in range(300)]
    ctx = PlanContext(g, times, LINK, 3, 1.0, time_limit_s=0.5, incumbent=True)
    plan = place("throughput", ctx)
    assert plan.info["solver_status"] == "Time limit reached"
    assert plan.info["gap"] > 0
    assert plan.info["bound_s"] < plan.objective
    # the placement returned is the one whose cost was reported
    assert cost.cycle_time(g, plan.place, times, LINK, 3, 1.0) == \
        pytest.approx(plan.objective, rel=1e-6)
    with pytest.raises(RuntimeError, match="Time limit"):
        place("throughput", PlanContext(g, times, LINK, 3, 1.0, time_limit_s=0.5))


TINY_LLAMA3 = ["model=llama3_8b", "model.size.hidden=64", "model.size.heads=4",
               "model.size.kv_heads=2", "model.size.ffn=128", "model.size.batch=2",
               "model.size.kv_len=8", "model.size.layers=2"]


def _alone_s(profile_dir, key: str, layers: int) -> float:
    import csv

    with (profile_dir / "kernel_times.csv").open() as f:
        return layers * sum(float(r[f"t_{key}_s"]) for r in csv.DictReader(f))


@pytest.mark.slow
def test_a_model_with_a_prefill_phase_is_served_with_pd(run_build) -> None:
    result = run_build([*GPUS, *TINY_LLAMA3, "serve.requests=30", "serve.rate=2000"])
    phase = {"prefill.lower", "prefill.extract", "prefill.profile", "prefill.decide"}
    assert phase <= set(result.executed)
    pre = json.loads((artifact_dir(result, "prefill.extract") / "kernels.json").read_text())
    dec = json.loads((artifact_dir(result, "extract") / "kernels.json").read_text())
    assert pre["layers"] == dec["layers"] == 2
    assert "k_cache" not in json.dumps(pre) and "k_cache" in json.dumps(dec)
    served = json.loads((artifact_dir(result, "simulate") / "report.json").read_text())[
        "serving"]
    pd = served["rows"]["PD disaggregation"]
    p, d = ("a100", "l40s") if pd["prefill_on"] == "a100" else ("l40s", "a100")
    t_pre = _alone_s(artifact_dir(result, "prefill.profile"), p, 2)
    t_dec = _alone_s(artifact_dir(result, "profile"), d, 2)
    link = Link(200, 5.0)  # pimbuild/conf/link/rdma200.yaml
    rate = min(1 / t_pre, 2 / (129 * t_dec), 1 / link.seconds(pd["kv_bytes_per_request"]))
    assert pd["tokens_per_s"] == pytest.approx(129 * rate, rel=1e-9)
    # k and v of 2 layers, 8 prompt positions, 2 kv heads of 16, at bf16
    assert pd["kv_bytes_per_request"] == 2 * 2 * 8 * 2 * 16 * 2
    simulated = served["simulated"]["systems"]
    assert {"planned", "a100 alone", "l40s alone", "request distribution",
            "PD (prefill on a100)", "PD (prefill on l40s)"} <= set(simulated)
    assert all(s["requests"] == 30 and s["tokens_per_s"] > 0 for s in simulated.values())
    # the prompt length came from the prefill recipe; every request got all its tokens
    assert simulated["planned"]["prefills"] == 30
    again = run_build([*GPUS, *TINY_LLAMA3, "serve.requests=30", "serve.rate=2000",
                       "serve.output_len=64"])
    assert again.executed == ["simulate"]


@pytest.mark.slow
def test_three_devices_are_served_in_the_simulation(run_build) -> None:
    """Three devices, two of them twins (not home, the first): the serving simulation runs
    every split of the devices in two for PD and AF, one of each pair of twin splits, and
    request distribution holds a replica on every device, twins included."""
    # the spec roofline, where the L40S serves at least half the A100's rate (the replica
    # check below counts on it)
    result = run_build(["system=gpus", "devices=[l40s,a100,a100]", *TINY_LLAMA3,
                        "serve.requests=30", "serve.arrivals=offline", "serve.monitor=false",
                        "gpus.backend=roofline"])
    served = json.loads((artifact_dir(result, "simulate") / "report.json").read_text())[
        "serving"]
    assert "simulation_skipped" not in served
    systems = served["simulated"]["systems"]
    assert {k for k in systems if k.startswith("PD")} == {
        f"PD (prefill on {p}, decode on {d})" for p, d in (
            ("l40s", "a100#1+a100#2"), ("a100#1", "l40s+a100#2"), ("l40s+a100#1", "a100#2"),
            ("a100#1+a100#2", "l40s"))}
    assert {k for k in systems if k.startswith("AF")} == {
        f"AF (attention on {a})" for a in ("l40s", "a100#1", "l40s+a100#1", "a100#1+a100#2",
                                           "a100#1+a100#2 (TP=2)")}
    assert "a100#1 alone" in systems and "a100#2 alone" not in systems
    assert all(s["requests"] == 30 for s in systems.values())
    one = max(systems["a100#1 alone"]["tokens_per_s"], systems["l40s alone"]["tokens_per_s"])
    assert systems["request distribution"]["tokens_per_s"] > 2.5 * one


@pytest.mark.parametrize("policy", ["throughput", "latency"])
def test_a_milp_stopped_early_is_never_worse_than_its_start(policy: str) -> None:
    """A MIP start (``PlanContext.start``): a planner stopped by its time limit returns a
    placement at least as good as the start in its own objective."""
    rng = random.Random(3)
    one = random_graph(rng, 8, carried=True)
    layer = [[t, 2.5 * t] for t in (rng.uniform(1e-5, 1e-4) for _ in range(8))]
    for layers, limit in ((24, 0.01), (4, 60.0)):  # stopped early; solved
        g, times = ddg.unroll(one, layers), layer * layers
        score = {"throughput": lambda p, g=g, t=times: cost.cycle_time(g, p, t, LINK, 2, 1.0),
                 "latency": lambda p, g=g, t=times: cost.critical_path(g, p, t, LINK, 2)
                 }[policy]
        start = min((tuple([0] * (m * 8) + [1] * ((layers - m) * 8))
                     for m in range(1, layers)), key=score)  # the best whole-layer split
        plan = place(policy, PlanContext(g, times, LINK, 2, 1.0, time_limit_s=limit,
                                         incumbent=True, start=start))
        assert plan.objective <= score(start) * (1 + 1e-9)
    assert plan.info["solver_status"] == "Optimal"


@pytest.mark.slow
def test_a_period_of_layers_is_placed_checked_and_served(run_build) -> None:
    """gpus.period=2 on a 2-layer model: decide places both layers as one graph, reinsert
    checks every distinct layer placement against eager, and the simulation (cost model and
    serving, whose KV caches map layer by layer) is at least one layer's placement reused:
    that placement is among the period's."""
    over = [*GPUS, *TINY_LLAMA3, "serve.requests=30", "serve.rate=2000"]
    once = run_build(over)
    twice = run_build([*over, "gpus.period=2"])
    n = len(json.loads((artifact_dir(twice, "extract") / "kernels.json").read_text())[
        "kernels"])
    placement = json.loads((artifact_dir(twice, "decide") / "placement.json").read_text())
    assert placement["period"] == 2 and len(placement["place"]) == 2 * n
    assert [k["layer"] for k in placement["kernels"]] == [0] * n + [1] * n
    start = placement["start"]  # the MILP started from the better of reuse and the splits
    assert placement["objective_s"] <= start["objective_s"] * (1 + 1e-9)
    assert start["objective_s"] <= start["reused_objective_s"] * (1 + 1e-9)
    assert start["reused_objective_s"] == pytest.approx(2 * json.loads(
        (artifact_dir(once, "decide") / "placement.json").read_text())["objective_s"])
    check = json.loads((artifact_dir(twice, "reinsert") / "reinsert.json").read_text())
    distinct = {tuple(placement["place"][:n]), tuple(placement["place"][n:])}
    assert check["placements"] == len(distinct) and check["max_rel_error"] <= check["rtol"]
    r1, r2 = (json.loads((artifact_dir(r, "simulate") / "report.json").read_text())
              for r in (once, twice))
    assert r2["period"] == 2 and r2["kernels"] == r1["kernels"] == n
    assert r2["baselines"] == r1["baselines"]  # the baselines place one layer
    tight = 1 - 1e-9
    assert r2["planned"]["throughput"] >= r1["planned"]["throughput"] * tight
    assert r2["planned"]["throughput"] >= r2["baselines"]["layer pipeline"]["throughput"] * tight
    hint = "gpus.period=2 plans the 2 layers"  # said where the layer pipeline is ahead
    assert (hint in " ".join(r1["summary"])) == (r1["speedup_over"]["layer pipeline"] < 1)
    assert hint not in " ".join(r2["summary"])
    s1, s2 = r1["serving"], r2["serving"]
    assert s2["rows"]["planned"]["tokens_per_s"] >= s1["rows"]["planned"]["tokens_per_s"] * tight
    pd = [s["rows"]["PD disaggregation"] for s in (s1, s2)]
    assert pd[1]["kv_bytes_per_request"] == pd[0]["kv_bytes_per_request"]
    assert pd[1]["tokens_per_s"] == pytest.approx(pd[0]["tokens_per_s"], rel=1e-9)
    assert s2["simulated"]["systems"]["planned"]["prefills"] == 30
    # In the serving simulation every layer's KV cache moves in PD, one buffer per layer
    # (a period of one moves both layers' as one: one link latency less, a few percent of a
    # step of this tiny model's ten engine kernels of a few microseconds each). With one
    # layer's names (no per-layer map) the simulation fails on a buffer the period's graph
    # lacks.
    pd1, pd2 = (s["simulated"]["systems"]["PD (prefill on a100)"] for s in (s1, s2))
    assert pd2["tokens_per_s"] == pytest.approx(pd1["tokens_per_s"], rel=0.03)
    with pytest.raises(StageError, match=r"gpus.period=3 does not divide the model's 2 "
                                         r"layer\(s\): choose one of 1, 2"):
        run_build([*over, "gpus.period=3", "stages=[decide]"])
    with pytest.raises(ConfigError, match=r"gpus.period must be >= 1 \(got 0\)"):
        run_build([*over, "gpus.period=0"])


def test_both_targets_build_one_model_in_one_store(run_build) -> None:
    """The GPU target's extract takes the loop-nest extract's Params: the module must still
    tell their artifacts apart (they write different files)."""
    pim = run_build(["model=relu", "model.size.n=4096", "stages=[extract]"])
    gpus = run_build([*GPUS, "model=relu", "model.size.n=4096", "stages=[extract]"])
    assert artifact_dir(pim, "extract") != artifact_dir(gpus, "extract")
    assert (artifact_dir(gpus, "extract") / "kernels.json").is_file()
    assert (artifact_dir(pim, "extract") / "candidates.json").is_file()


def test_a_buffer_written_in_place_is_found_as_state(run_build) -> None:
    """A KV cache kept as a module buffer and written in place: torch.export returns its new
    value, and the GPU target takes it as the state the next forward reads (the recipe
    declares nothing); the multi-process run checks the written cache against eager."""
    result = run_build([*GPUS, "model=relu", "model.recipe=tests.odd_recipes:cached_step",
                        "model.size={n:16}"])
    sig = json.loads((artifact_dir(result, "lower") / "signature.json").read_text())
    assert sig["mutations"] == {"cache": 0} and sig["state"] == {"cache": 0}
    data = json.loads((artifact_dir(result, "extract") / "kernels.json").read_text())
    cache_arg = next(f"arg{i}" for i, a in enumerate(sig["args"]) if a["source"] == "cache")
    assert data["state"] == {cache_arg: data["outputs"][0]}
    graph = ddg.build(data, 1)
    assert cache_arg in graph.state and cache_arg in graph.buffer_bytes
    check = json.loads((artifact_dir(result, "reinsert") / "reinsert.json").read_text())
    assert check["max_rel_error"] <= check["rtol"]


@pytest.mark.slow
def test_serving_from_a_trace_and_its_errors(run_build, tmp_path) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0.0,8,3\n0.001,16,5\n"
                     "0.002,4,2\n")
    over = [*GPUS, *TINY_LLAMA3, "serve.arrivals=trace", f"serve.trace={trace}"]
    result = run_build(over)
    sim = json.loads((artifact_dir(result, "simulate") / "report.json").read_text())[
        "serving"]["simulated"]
    assert sim["requests"] == 3
    assert all(s["requests"] == 3 for s in sim["systems"].values())
    trace.write_text("arrival_s,input_tokens,output_tokens\n0.0,8,3\n")  # edited: rebuilt
    again = run_build(over)
    assert again.executed == ["simulate"]
    with pytest.raises(ConfigError, match="serve.arrivals=trace needs serve.trace"):
        run_build([*GPUS, *TINY_LLAMA3, "serve.arrivals=trace"])
    with pytest.raises(ConfigError, match="serve.arrivals=sometimes: choose one of"):
        run_build([*GPUS, *TINY_LLAMA3, "serve.arrivals=sometimes"])


def test_af_on_three_devices_takes_requests_in_turn() -> None:
    """AF disaggregation over 2 A100 + 1 L40S (the paper's Fig. 9 setup): attention on one
    set of devices, the rest on the other, a set of two taking alternate requests, so each
    carries half its stage's load. By hand, with a free link: attention 4 us on an A100 and
    9 on the L40S, the rest 5 and 3; attention on both A100s and the rest on the L40S
    gives a cycle of max(4 / 2, 4 / 2, 3) = 3 us, the best of the six splits. On two devices
    the baseline is the better of attention on either, as a single placement."""
    from pimbuild.targets.gpus.systems import baselines, closedform

    k = (Kernel(0, "attn", "contraction", 0, {"in": 4096}, {"a": 4096}, "self_attn"),
         Kernel(1, "ffn", "contraction", 0, {"a": 4096}, {"out": 4096}, "mlp"))
    g = Graph(k, {"in": 4096, "a": 4096, "out": 4096}, {"a": 0, "out": 1},
              {"in": (0,), "a": (1,)}, ("in",), ("out",), {})
    times = [[4e-6, 4e-6, 9e-6], [5e-6, 5e-6, 3e-6]]
    devices = [type("D", (), {"key": key, "price_per_hour": 1.0})()
               for key in ("a100#1", "a100#2", "l40s")]
    unit = baselines.Unit(1, 1, "tokens", 1)
    free = PlanContext(g, times, Link(1e12, 0.0), 3, 1.0)
    ways = dict(closedform.af_ways(free, devices))
    assert len(ways) == 6 and ways["a100#1+a100#2"] == [[0, 2], [1, 2]]
    af = baselines.baselines(free, devices, unit)["AF disaggregation"]
    assert af["attention_on"] == "a100#1+a100#2"
    assert af["cycle_s"] == pytest.approx(3e-6)
    assert af["on_device"] == [0.5, 0.5, 1]
    # with the link: every request moves "a" to the L40S and "out" home (A100#1), so the
    # L40S, which receives one and sends one per request, stays the busiest
    real = PlanContext(g, times, LINK, 3, 1.0)
    hop = LINK.seconds(4096)
    r = baselines.evaluate_turns(real, ways["a100#1+a100#2"], unit, 3.0)
    assert r["cycle_s"] == pytest.approx(max(4e-6 / 2 + hop, 3e-6 + 2 * hop))
    two = PlanContext(g, [row[::2] for row in times], LINK, 2, 1.0)
    pair = [devices[0], devices[2]]
    want = max((baselines.evaluate(two, p, unit, 2.0) for p in ([0, 1], [1, 0])),
               key=lambda r: r["throughput"])
    got = baselines.baselines(two, pair, unit)["AF disaggregation"]
    assert got["cycle_s"] == pytest.approx(want["cycle_s"])


def test_af_with_tp_attention_runs_the_group_as_one_device() -> None:
    """The paper's cluster AF baseline: attention with TP=2 on the two A100s, the rest on the
    L40S (``pimbuild.targets.gpus.systems.tp``). By hand: attention takes 4 us on an A100 with a
    2 us launch, so 2 + 2 / 2 = 3 us on the group, plus the all-reduce of "a" (2 steps of half
    of it) and the broadcast of "in" (one step of all of it) over the TP link; with a free
    cluster link the group is the busiest."""
    from dataclasses import replace

    from pimbuild.targets.gpus.systems import baselines, tp
    from pimbuild.targets.gpus.target import Device

    k = (Kernel(0, "attn", "contraction", 0, {"in": 4096}, {"a": 4096}, "self_attn"),
         Kernel(1, "ffn", "contraction", 0, {"a": 4096}, {"out": 4096}, "mlp"))
    g = Graph(k, {"in": 4096, "a": 4096, "out": 4096}, {"a": 0, "out": 1},
              {"in": (0,), "a": (1,)}, ("in",), ("out",), {})
    a100 = Device("a100", "A100", 19.5, 312, 2039, 40, 80, 2.0, 1.5)
    l40s = Device("l40s", "L40S", 91.6, 362, 864, 96, 48, 2.0, 1.0)
    devices = [replace(a100, key="a100#1"), replace(a100, key="a100#2"), l40s]
    times = [[4e-6, 4e-6, 9e-6], [5e-6, 5e-6, 3e-6]]
    nvlink = Link(8.0, 1.0)  # 1 GB/s and 1 us: collectives that show
    free = PlanContext(g, times, Link(1e12, 0.0), 3, 1.0)
    [way] = tp.ways(free, devices, nvlink)
    assert way.name == "a100#1+a100#2 (TP=2)" and way.at == 0 and way.turns == [[0, 1]]
    assert [d.key for d in way.devices] == [way.name, "l40s"]
    assert way.devices[0].price_per_hour == 3.0
    group = 3e-6 + 2 * nvlink.seconds(2048) + nvlink.seconds(4096)
    assert way.ctx.times == [[pytest.approx(group), 9e-6], [5e-6, 3e-6]]
    unit = baselines.Unit(1, 1, "tokens", 1)
    base = baselines.baselines(free, devices, unit, nvlink)
    assert base["AF disaggregation (TP)"]["cycle_s"] == pytest.approx(group)
    assert base["AF disaggregation (TP)"]["attention_on"] == way.name
    assert "AF disaggregation (TP)" not in baselines.baselines(free, devices, unit)
    # serving's closed form: the same grouped cycle for both phases, 4 layers
    from pimbuild.targets.gpus.systems import closedform

    w = closedform.Workload(output_len=10, batch=4)
    ph = closedform.phase(free, [0, 0], 4, closedform.af_ways(free, devices), [way])
    assert ph.af_tp == {way.name: pytest.approx(4 * group)}
    row = closedform.compare(w, ph, ph, [d.key for d in devices], [1.5, 1.5, 1.0], LINK)[
        "AF disaggregation (TP)"]
    assert row["tokens_per_s"] == pytest.approx(closedform.mixed(w, 4 * group, 4 * group))
    assert row["attention_on"] == way.name
    # no twins, no group; the group is second when home is not in it
    assert tp.ways(PlanContext(g, [r[1:] for r in times], LINK, 2, 1.0), devices[1:],
                   nvlink) == []
    assert tp.groups([l40s, *devices[:2]]) == [tp.Group((1, 2), (0,))]
    assert tp.Group((1, 2), (0,)).order == [(0,), (1, 2)]
    # three twins and an L40S: the pairs that leave home out are one group, not two
    three = [*devices[:2], replace(a100, key="a100#3"), l40s]
    assert tp.groups(three) == [tp.Group((0, 1), (2, 3)), tp.Group((1, 2), (0, 3)),
                                tp.Group((0, 1, 2), (3,))]


def test_fig2_compares_the_first_device_with_another_model() -> None:
    """Fig. 2's share of kernels faster on the second device: on 2 A100 + 1 L40S the L40S,
    not the A100 twin (equal times, never faster)."""
    from pimbuild.targets.gpus.profile import fig2

    t = [[2.0, 2.0, 1.0], [1.0, 1.0, 3.0], [4.0, 4.0, 3.0]]
    f = fig2(None, t, ["A100", "A100", "L40S"])
    assert (f["second"], f["faster_on_second"]) == (2, 2)
    assert f["share_by_time"] == pytest.approx(6 / 7)
    assert fig2(None, t, ["A100", "H100", "L40S"])["faster_on_second"] == 0  # device 1


def test_an_isolated_forward_takes_its_state_from_home(run_build) -> None:
    """One forward (layers = 0, as reinsert runs it): the state a module buffer holds (the
    KV cache written in place) enters from home like an input, so a placement that puts its
    writer on another device sends it there from home, which the home worker does."""
    from pimbuild.targets.gpus.program import workers

    result = run_build([*GPUS, "model=relu", "model.recipe=tests.odd_recipes:cached_step",
                        "model.size={n:16}", "stages=[extract]"])
    data = json.loads((artifact_dir(result, "extract") / "kernels.json").read_text())
    (cache,) = data["state"]
    graph = ddg.build(data, layers=0)
    assert cache in graph.inputs and cache in graph.buffer_bytes
    readers = graph.readers[cache]
    place = [1 if k.id in readers else 0 for k in graph.kernels]
    moved = ddg.transfers(graph, place)
    assert (cache, 0, 1, graph.buffer_bytes[cache]) in moved
    specs = [{"id": k.id, "results": list(k.writes)} for k in graph.kernels]
    assert workers.unsent_transfers(specs, place, moved, set(graph.inputs)) == []


@pytest.mark.parametrize("seed", range(6))
def test_planners_keep_each_device_within_its_memory(seed: int) -> None:
    """With what each kernel keeps where it runs and each device's room (``resident``,
    ``capacity``), every planner's optimum is brute force's over the placements that fit,
    per kernel and with identical layers counted; a placement that fits nowhere fails."""
    from pimbuild.targets.gpus.planners import unrolled

    rng = random.Random(300 + seed)
    n, period = (3, 3) if seed % 2 else (4, 2)
    g = layer_graph(rng, n)
    one = PlanContext(g, layer_times(rng, n, True), LINK, 2, 0.5)
    resident = tuple(rng.choice([0, 1, 2, 3]) * 1e9 for _ in range(n))  # weights, KV: GB
    total = sum(resident) * period
    assert total > 0
    # the faster device 0 holds a little over a third of it: the unconstrained optimum,
    # which puts most kernels there, no longer fits
    capacity = (total * 0.4 + 0.5e9, total)
    ctx = unrolled(replace(one, resident=resident, capacity=capacity), period)
    fitting = [list(p) for p in itertools.product(range(2), repeat=n * period) if ctx.fits(p)]
    assert fitting and len(fitting) < 2 ** (n * period)
    best_cycle = min(cost.cycle_time(ctx.graph, p, ctx.times, LINK, 2, 0.5) for p in fitting)
    best_path = min(cost.critical_path(ctx.graph, p, ctx.times, LINK, 2) for p in fitting)
    thr = place("throughput", ctx)
    assert "aggregated" in thr.info["formulation"] and ctx.fits(thr.place)
    assert thr.objective == pytest.approx(best_cycle, rel=1e-7)
    flat = replace(ctx, layer=None, period=1)
    assert place("throughput", flat).objective == pytest.approx(best_cycle, rel=1e-7)
    lat = place("latency", flat)
    assert ctx.fits(lat.place) and lat.objective == pytest.approx(best_path, rel=1e-7)
    with pytest.raises(RuntimeError):
        place("throughput", replace(ctx, capacity=(0.0, 0.0)))
