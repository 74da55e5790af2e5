"""reinsert's check against eager cannot pass vacuously, and keeps every output's dtype."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from pimbuild.core.check import FLOAT_TYPES, MULTIPLIER, NARROW_MULTIPLIER, RTOL, difference, judge
from pimbuild.core.errors import StageError
from tests.conftest import artifact_dir

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(("got", "want", "ok"), [
    ([1.0, 2.0], [1.0, 2.0], True),
    ([1.0, 2.5], [1.0, 2.0], False),
    ([NAN, 2.0], [NAN, 2.0], True),  # NaN where eager has NaN
    ([1.0, 2.0], [NAN, 2.0], False),  # a number where eager has NaN
    ([NAN, 2.0], [1.0, 2.0], False),
    ([INF, 2.0], [-INF, 2.0], False),
    ([INF, NAN], [INF, NAN], True),  # nothing finite to compare: positions agree
])
def test_floats_with_nan_and_inf(got, want, ok: bool) -> None:
    d = difference(np.array(got, np.float32), np.array(want, np.float32))
    assert not np.isnan(d)
    assert (d <= RTOL) == ok


def test_integers_and_booleans_are_exact() -> None:
    assert difference(np.array([1, 2], np.int32), np.array([1, 2], np.int32)) == 0.0
    assert difference(np.array([1, 3], np.int64), np.array([1, 2], np.int64)) == INF
    assert difference(np.array([True, False]), np.array([True, True])) == INF
    assert difference(np.array([True]), np.array([True])) == 0.0


def test_dtype_shape_and_empty() -> None:
    assert difference(np.zeros(2, np.float32), np.zeros(2, np.float64)) == INF
    assert difference(np.zeros(2, np.float32), np.zeros(3, np.float32)) == INF
    assert difference(np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32)) == 0.0


F32 = {"float_types": ["f32"]}


def _never() -> None:
    raise AssertionError("the float64 referee was asked where the tolerance decides")


def test_judge_within_tolerance_asks_no_referee() -> None:
    want = np.linspace(-1, 1, 64, dtype=np.float32)
    verdict = judge([want * (1 + 1e-6)], [want], F32, _never)
    assert verdict["passed"] and "fp64" not in verdict


@pytest.mark.parametrize(("program", "eager", "passed"), [
    (0.0, 1e-4, True),  # eager is the one off: the program is exact
    (1e-4, 1e-4, True),  # as far as eager, on the other side
    (2e-4, 1e-4, True),  # MULTIPLIER x eager's error
    (2.2e-4, 1e-4, False),  # past MULTIPLIER x eager's error + rtol / 10
    (1e-4, 0.0, False),  # eager is exact, the program is not
])
def test_judge_holds_both_to_a_float64_run(program: float, eager: float, passed: bool) -> None:
    exact = np.linspace(-1, 1, 64)
    signs = np.where(np.arange(64) % 2, 1.0, -1.0)
    got, want = (exact + program * signs).astype(np.float32), (exact - eager * signs).astype(
        np.float32)
    asked = []
    verdict = judge([got], [want], F32, lambda: asked.append(1) or [exact])
    assert asked == [1] and verdict["max_rel_error"] > RTOL
    assert verdict["passed"] == passed
    assert verdict["fp64"]["program"] == pytest.approx(program, abs=1e-7)
    assert verdict["fp64"]["eager"] == pytest.approx(eager, abs=1e-7)
    assert verdict["fp64"]["multiplier"] == MULTIPLIER and verdict["fp64"]["outputs"] == [0]


def test_judge_without_a_float64_run_fails() -> None:
    want = np.ones(8, np.float32)
    verdict = judge([want * 1.001], [want], F32, lambda: None)
    assert not verdict["passed"] and verdict["fp64"] is None
    assert not judge([want * 1.001], [want], F32)["passed"]  # no referee given


def test_judge_refers_no_difference_in_kind() -> None:
    """NaN where eager has a number, or integers that differ: no float64 run can excuse it."""
    nan = np.array([np.nan, 1.0], np.float32)
    assert not judge([nan], [np.ones(2, np.float32)], F32, _never)["passed"]
    ints = [np.array([1, 2])], [np.array([1, 3])]
    assert not judge(*ints, F32, _never)["passed"]


def test_a_failed_check_says_what_differs() -> None:
    # It read "max relative error inf > 1e-05" alone: for sort indices that differ where
    # values tie, NaN at other places, or an output of another shape.
    ok, idx = np.ones(3, np.float32), np.array([[0, 1, 2], [2, 1, 0]])
    verdict = judge([ok, idx[::-1].copy()], [ok, idx], F32)
    assert verdict["where"] == ("output 1, int64 of shape (2, 3): 4 of 6 elements differ; "
                                "if it holds indices (of a sort, top-k or arg-max), PyTorch "
                                "leaves the order of equal values unspecified")
    nan = np.array([np.nan, 1.0, np.inf], np.float32)
    assert judge([nan], [np.array([np.nan, 1.0, 2.0], np.float32)], F32)["where"] == (
        "output 0, float32 of shape (3,): NaN or infinities differ at 1 of 3 elements")
    assert judge([ok[:2]], [ok], F32)["where"] == (
        "output 0, float32 of shape (3,): the program returned float32 of shape (2,)")
    assert judge([ok * 1.5], [ok], F32)["where"].endswith("max relative error 0.5")
    assert judge([ok > 0], [ok < 0], F32)["where"].endswith("3 of 3 elements differ")
    assert "where" not in judge([ok], [ok], F32)


def test_judge_narrow_types_get_the_wider_multiplier() -> None:
    exact = np.linspace(-1, 1, 64)
    got, want = exact + 0.025, exact - 0.01
    verdict = judge([got.astype(np.float32)], [want.astype(np.float32)],
                    {"float_types": ["bf16", "f32"]}, lambda: [exact])
    assert verdict["fp64"]["multiplier"] == NARROW_MULTIPLIER and verdict["passed"]


@pytest.mark.slow
def test_a_program_closer_to_float64_than_eager_passes(run_build, monkeypatch, capsys) -> None:
    """Where eager's own result is off (here made so), the program is held to a float64 run
    of the model: no further from it than eager, it passes, and the run says how."""
    from pimbuild import frontend

    materialize = frontend.materialize

    def off(p, sig):
        args, expected = materialize(p, sig)
        return args, [e * np.float32(1 + 2e-4) for e in expected]

    monkeypatch.setattr(frontend, "materialize", off)
    result = run_build(["model=relu", "model.size={n:64}", "profile.backend=timer",
                        "policy=oracle"])
    check = json.loads((artifact_dir(result, "reinsert") / "reinsert.json").read_text())[
        "check"]
    assert check["passed"] and check["max_rel_error"] > RTOL
    assert check["fp64"]["program"] < 1e-6 < check["fp64"]["eager"]
    assert "is no further from the model run in float64 than eager" in " ".join(
        capsys.readouterr().out.split())


def test_a_model_without_a_float64_run_fails_saying_so(run_build, monkeypatch) -> None:
    from pimbuild import frontend

    materialize = frontend.materialize

    def off(p, sig):
        args, expected = materialize(p, sig)
        return args, [e * np.float32(1 + 2e-4) for e in expected]

    monkeypatch.setattr(frontend, "materialize", off)
    with pytest.raises(StageError, match="the model cannot run in float64 to tell which of "
                                         "the two is closer"):
        run_build(["model=relu", "model.recipe=tests.odd_recipes:float32_only",
                   "model.size={n:64}", "profile.backend=timer", "policy=oracle"])


@pytest.mark.slow
def test_outputs_of_every_supported_dtype_go_through_every_stage(run_build) -> None:
    result = run_build(["model=relu", "model.recipe=tests.odd_recipes:mixed_dtypes",
                        "model.size={n:64}", "profile.backend=timer",
                        "policy=oracle"])
    sig = json.loads((artifact_dir(result, "lower") / "signature.json").read_text())
    assert [o["dtype"] for o in sig["outputs"]] == ["float64", "int32", "int64", "bool"]
    check = json.loads((artifact_dir(result, "reinsert") / "reinsert.json").read_text())
    assert check["check"]["max_rel_error"] <= RTOL


@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["tensor_constant", "empty_output", "with_nan",
                                    "only_empty", "running_sum", "scatter_rows",
                                    "sorted_values", "cached_step", "nested_outputs",
                                    "tensor_literal", "returns_input", "gelu_tanh_mlp",
                                    "reciprocal_of_zero", "uint8_arithmetic",
                                    "constant_result", "topk_router", "scalar_outputs",
                                    "only_a_scalar", "triangular_det"])
def test_unusual_models_go_through_every_stage(run_build, recipe: str) -> None:
    result = run_build(["model=relu", f"model.recipe=tests.odd_recipes:{recipe}",
                        "model.size={n:64}", "profile.backend=timer"])
    check = json.loads((artifact_dir(result, "reinsert") / "reinsert.json").read_text())
    assert check["check"]["max_rel_error"] <= RTOL
    assert (artifact_dir(result, "simulate") / "report.md").is_file()


def test_tm_tensor_ir_parses_again(run_build) -> None:
    """IR with TMTensor ops (cumsum's scan) round-trips, so repro commands work on it."""
    from pimbuild.frontend import mlir

    result = run_build(["model=relu", "model.recipe=tests.odd_recipes:running_sum",
                        "model.size={n:64}", "stages=[lower]"])
    linalg = artifact_dir(result, "lower") / "linalg.mlir"
    assert "tm_tensor.scan" in linalg.read_text()
    assert "tm_tensor.scan" in mlir.asm(mlir.parse_file(linalg))


@pytest.mark.slow
def test_bfloat16_arithmetic_is_emulated_in_float32(run_build) -> None:
    """No bf16 arithmetic or truncation to bf16 reaches LLVM, which would call compiler-rt's
    __truncsfbf2 / __truncdfbf2 on a host without AVX512-BF16 (and always in valgrind's
    build); the check holds such a program to bf16's tolerance."""
    result = run_build(["model=relu", "model.recipe=tests.odd_recipes:bfloat16_inside",
                        "model.size={n:64}", "profile.backend=timer", "policy=oracle"])
    sig = json.loads((artifact_dir(result, "lower") / "signature.json").read_text())
    assert sig["float_types"] == ["bf16", "f32", "f64"]
    scf = (artifact_dir(result, "lower") / "scf.mlir").read_text()
    assert re.search(r"arith\.truncf [^\n]*f64 to bf16", scf)  # what LLVM would call out for
    assert re.search(r"arith\.addf [^\n]*: bf16", scf)
    llvm = (artifact_dir(result, "reinsert") / "hybrid_llvm.mlir").read_text()
    assert not re.search(r"llvm\.(fptrunc|fpext|fadd|fmul|fsub|fdiv|intr\.\w+)\b[^\n]*bf16",
                         llvm)
    check = json.loads((artifact_dir(result, "reinsert") / "reinsert.json").read_text())
    assert check["check"]["rtol"] == FLOAT_TYPES["bf16"]


def test_a_lowering_that_differs_from_eager_is_told_from_the_partition(
        run_build, monkeypatch) -> None:
    """With torch-mlir's own GELU-tanh (sqrt(2/pi) taken as 0.797724), the program differs
    from eager before any nest is offloaded, and the failure says so."""
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    from pimbuild import frontend

    monkeypatch.setattr(frontend.exported, "decompositions", get_decomposition_table)
    with pytest.raises(StageError, match=r"against the model run in float64 the program's "
                                         r"error is .* and eager's own .*; the lowered program "
                                         r"before partitioning already differs by .*, so the "
                                         r"lowering \(torch-mlir, LLVM\), not the partition"):
        run_build(["model=relu", "model.recipe=tests.odd_recipes:gelu_tanh_mlp",
                   "model.size={n:64}", "profile.backend=timer"])


def test_run_time_assertions_are_dropped_and_recorded(run_build) -> None:
    result = run_build(["model=relu", "model.recipe=tests.odd_recipes:reciprocal_of_zero",
                        "model.size={n:64}", "stages=[lower]"])
    lower = artifact_dir(result, "lower")
    sig = json.loads((lower / "signature.json").read_text())
    assert sig["dropped_asserts"] == {"unimplemented: tensor with zero element": 1}
    assert "cf.assert" not in (lower / "scf.mlir").read_text()


@pytest.mark.slow
def test_training_mode_is_recorded_and_said(run_build, capsys) -> None:
    """pimbuild builds the inference forward (``eval()``): a model left in training mode with
    layers that compute otherwise there is told so, and its check is against eager in
    inference (the run matches, which dropout's draws in training mode could not)."""
    result = run_build(["model=relu", "model.recipe=tests.odd_recipes:training_mode",
                        "model.size={n:16}", "profile.backend=timer", "stages=[reinsert]"])
    sig = json.loads((artifact_dir(result, "lower") / "signature.json").read_text())
    assert sig["evaluated"] == ["BatchNorm1d", "Dropout"]
    assert "is in training mode with BatchNorm1d, Dropout" in " ".join(
        capsys.readouterr().out.split())
    check = json.loads((artifact_dir(result, "reinsert") / "reinsert.json").read_text())
    assert check["check"]["max_rel_error"] <= RTOL
    run_build(["model=relu", "model.size={n:16}", "stages=[lower]"])
    assert "training mode" not in capsys.readouterr().out


def test_training_layers_are_those_whose_forward_changes() -> None:
    from torch import nn

    from pimbuild.frontend import training_layers

    assert training_layers(nn.Sequential(nn.Linear(4, 4), nn.ReLU())) == []  # train, alike
    assert training_layers(nn.Dropout(0.0)) == []
    assert training_layers(nn.InstanceNorm1d(4)) == []  # no running statistics
    assert training_layers(nn.InstanceNorm1d(4, track_running_stats=True)) == [
        "InstanceNorm1d"]
    assert training_layers(nn.LSTM(4, 4, num_layers=1)) == []
    assert training_layers(nn.LSTM(4, 4, num_layers=2, dropout=0.1)) == ["LSTM"]
    assert training_layers(nn.MultiheadAttention(4, 2, dropout=0.1)) == [
        "MultiheadAttention"]
    assert training_layers(nn.Sequential(nn.BatchNorm1d(4), nn.Dropout()).eval()) == []


def test_float_types_cast_to_model_dtype_are_recorded_and_said(run_build, capsys) -> None:
    """pimbuild builds the model in model.dtype; a recipe's bfloat16 weights or float16
    inputs are cast to it, and the build says so instead of checking a changed model
    silently."""
    result = run_build(["model=relu", "model.recipe=tests.odd_recipes:half_precision_parts",
                        "model.size={n:16}", "stages=[lower]"])
    sig = json.loads((artifact_dir(result, "lower") / "signature.json").read_text())
    assert sig["cast"] == {"parameters": {"bfloat16": 2}, "inputs": {"x": "float16"}}
    assert sig["args"][0]["dtype"] == "float32"
    out = capsys.readouterr().out
    assert "2 bfloat16 parameter(s)/buffer(s), input 'x' in float16" in " ".join(out.split())
    run_build(["model=relu", "model.size={n:16}", "stages=[lower]"])
    assert "note: model" not in capsys.readouterr().out


def test_a_python_scalar_output_is_a_0d_tensor_of_its_exact_value() -> None:
    """Both sides return a Python scalar as a 0-d tensor (bool, int64, float64); the module
    keeps its class name and its parameters' names; a forward with none is untouched."""
    import torch

    from pimbuild.frontend.recipe import scalars_as_tensors
    from tests.odd_recipes import scalar_outputs

    recipe = scalar_outputs(8)
    names = [n for n, _ in recipe.module.named_parameters()]
    kind = type(recipe.module).__name__
    scalars_as_tensors(recipe)
    out = recipe.module(*recipe.inputs.values())
    assert out[1].dtype == torch.int64 and out[1].shape == () and int(out[1]) == 24
    assert out[2]["scale"].dtype == torch.float64 and float(out[2]["scale"]) == 0.5
    assert out[2]["square"].dtype == torch.bool and bool(out[2]["square"])
    assert recipe.scalars == {1: "int", 2: "float", 3: "bool"}
    assert type(recipe.module).__name__ == kind
    assert [n for n, _ in recipe.module.named_parameters()] == names
    plain = torch.nn.Linear(4, 2)
    from pimbuild.recipes import Recipe

    r = Recipe(plain, {"x": torch.randn(3, 4)})
    scalars_as_tensors(r)
    assert isinstance(r.module(*r.inputs.values()), torch.Tensor) and r.scalars == {}

    class Numbers(torch.nn.Module):  # a shape, numpy's scalars, a None (no output)
        def forward(self, x):
            return x * 2, x.shape, np.float32(0.25), np.int64(3), np.bool_(True), None

    r = Recipe(Numbers(), {"x": torch.randn(3, 2)})
    scalars_as_tensors(r)
    out = r.module(*r.inputs.values())
    assert r.scalars == {1: "int", 2: "int", 3: "float", 4: "int", 5: "bool"}
    assert [int(v) for v in out[1]] == [3, 2] and out[4].dtype == torch.bool and out[5] is None


def test_a_scalar_output_that_differs_fails_the_check() -> None:
    sig = {"outputs": [{"dtype": "int64"}], "scalars": [{"output": 0, "type": "int"}]}
    bad = judge([np.array(193)], [np.array(192)], sig)
    assert not bad["passed"] and bad["scalar_outputs"] == sig["scalars"]
    good = judge([np.array(192)], [np.array(192)], sig)
    from pimbuild.core.check import outcome

    assert good["passed"] and "Python scalar output(s) 0 (int)" in outcome(good)


@pytest.mark.slow
def test_python_scalar_outputs_go_through_every_stage(run_build) -> None:
    result = run_build(["model=relu", "model.recipe=tests.odd_recipes:scalar_outputs",
                        "model.size={n:64}", "profile.backend=timer"])
    sig = json.loads((artifact_dir(result, "lower") / "signature.json").read_text())
    assert sig["scalars"] == [{"output": 1, "type": "int"}, {"output": 2, "type": "float"},
                              {"output": 3, "type": "bool"}]
    assert [o["dtype"] for o in sig["outputs"]] == ["float32", "int64", "float64", "bool"]
    report = json.loads((artifact_dir(result, "simulate") / "report.json").read_text())
    assert report["hybrid_check"]["passed"]
    assert report["hybrid_check"]["scalar_outputs"] == sig["scalars"]
    assert "Python scalar output(s) 1 (int), 2 (float), 3 (bool)" in \
        (artifact_dir(result, "simulate") / "report.md").read_text()


@pytest.mark.slow
def test_triangular_nests_offloaded_inside_their_loop_match_eager(run_build) -> None:
    """det's LU elimination: nests whose bounds are an enclosing loop's ``n - 1 - i``, all
    offloaded: each invocation costed with its own counts, the segment inside the loop
    entered and left once per iteration (N_region), the program checked against eager."""
    result = run_build(["model=relu", "model.recipe=tests.odd_recipes:triangular_det",
                        "model.size={n:8}", "profile.backend=timer",
                        "policy.name=tests.odd_recipes:everything_offloaded"])
    nests = json.loads((artifact_dir(result, "extract") / "candidates.json").read_text())
    varying = [c for c in nests["candidates"] if "per_invocation" in c]
    assert varying and all(c["scope"] for c in varying)
    assert all([p[0] for p in c["per_invocation"]] == sorted(
        (p[0] for p in c["per_invocation"]), reverse=True) for c in varying)
    reinsert = json.loads((artifact_dir(result, "reinsert") / "reinsert.json").read_text())
    assert reinsert["check"]["passed"]
    looped = [s for s in reinsert["segments"] if nests["candidates"][s[0]].get("scope")]
    trips = nests["candidates"][looped[0][0]]["enclosing_trips"]
    assert reinsert["n_region"] == 2 * (trips * len(looped) + len(reinsert["segments"])
                                        - len(looped))
    report = json.loads((artifact_dir(result, "simulate") / "report.json").read_text())
    assert report["n_region"] == reinsert["n_region"]
