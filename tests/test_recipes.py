"""Every recipe lowers, yields the golden number of nests, and runs on the MLIR
ExecutionEngine with the same results as PyTorch eager (relative error 1e-5)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import DictConfig

from pimbuild import frontend
from pimbuild.codegen import jit, loops
from pimbuild.codegen.runtime import LIBRARY
from pimbuild.core import check
from pimbuild.frontend import lower
from pimbuild.targets.offload import reinsert
from tests import odd_recipes
from tests.conftest import make_cfg

# Nests per recipe at the default sizes (pimbuild/conf/model/*.yaml). Under fusion=none the
# paper gives:
# softmax 8, relu 1, ew_add 1, mlp (batch 1, no bias) 7, single-head attention 14.
GOLDEN_NESTS = {
    #  recipe:          (none, controlled)
    "ew_add": (1, 1),
    "copying": (1, 1),
    "scale": (1, 1),
    "zeroing": (1, 1),
    "relu": (1, 1),
    "silu": (2, 1),
    "gelu": (1, 1),
    "tanh": (1, 1),
    "softmax": (8, 6),
    "layernorm": (15, 7),
    "rmsnorm": (8, 4),
    "mac": (3, 3),
    "gemv": (3, 3),
    "matmul": (2, 2),
    "depthwise_conv": (4, 4),
    "attention": (14, 11),
    "mlp": (7, 5),
}
PAPER_NESTS = {"softmax": 8, "relu": 1, "ew_add": 1, "mlp": 7, "attention": 14}


def _lower(tmp_path: Path, overrides: list[str]) -> tuple[DictConfig, lower.Params, Path]:
    cfg = make_cfg(tmp_path / "store", overrides)
    params = lower.params(cfg)
    out = tmp_path / "lower"
    out.mkdir()
    lower.lower(params, out, tmp_path / "failure")
    return cfg, params, out


@pytest.mark.parametrize("fusion", ["none", "controlled"])
@pytest.mark.parametrize("model", sorted(GOLDEN_NESTS))
def test_recipe_nests_and_matches_eager(tmp_path: Path, runtime_dir: Path, model: str,
                                        fusion: str) -> None:
    cfg, params, out = _lower(tmp_path, [f"model={model}", f"lowering.fusion={fusion}"])
    signature = json.loads((out / "signature.json").read_text())
    found = loops.extract(out / "scf.mlir", signature)["candidates"]
    assert len(found) == GOLDEN_NESTS[model][0 if fusion == "none" else 1]

    engine = jit.compile_scf(out / "scf.mlir", tmp_path / "failure", cfg.lowering.register_block)
    args, expected = frontend.materialize(params.model, signature)
    results = jit.invoke(engine, signature["function"], args, signature["outputs"])
    assert len(results) == len(expected)
    for got, want in zip(results, expected, strict=True):
        assert got.shape == want.shape
        scale = max(float(np.abs(want).max()), 1e-30)
        assert float(np.abs(got - want).max()) / scale <= 1e-5

    # The hybrid program, with the even nests outlined for PIM, still matches eager
    # (reinsert.build raises if it differs or miscounts its transitions).
    pim = [c["id"] for c in found if c["id"] % 2 == 0]
    hybrid = tmp_path / "reinsert"
    hybrid.mkdir()
    reinsert.build(out, set(pim), runtime_dir / LIBRARY, reinsert.params(cfg),
                   cfg.lowering.register_block, hybrid, tmp_path / "failure")
    report = json.loads((hybrid / "reinsert.json").read_text())
    assert report["check"]["transitions"] == report["n_region"] == 2 * len(report["segments"])
    assert report["outlined"] == pim


def test_paper_nest_counts_are_in_the_golden_table() -> None:
    for model, count in PAPER_NESTS.items():
        assert GOLDEN_NESTS[model][0] == count


def test_the_arguments_need_no_forward_and_the_reference_leaves_them_as_they_are(
        tmp_path: Path, monkeypatch) -> None:
    """``materialize_args`` (what profile reads) runs no forward; the eager reference runs
    when asked for, after the arguments were taken from the module, and a forward that
    writes its buffer (a KV cache) leaves them as they were: the program run on them then
    matches the reference."""
    from pimbuild.frontend import arguments

    cfg, params, out = _lower(tmp_path, ["model=relu", "model.recipe=tests.odd_recipes:cached_step",
                                         "model.size={n:16}"])
    signature = json.loads((out / "signature.json").read_text())
    forwards = []
    eager = arguments.eager
    monkeypatch.setattr(arguments, "eager", lambda *a: forwards.append(1) or eager(*a))
    taken = [a.copy() for a in frontend.materialize_args(params.model, signature)]
    assert not forwards
    args, expected = frontend.materialize(params.model, signature)
    assert len(forwards) == 1
    assert all(np.array_equal(a, b) for a, b in zip(args, taken, strict=True))
    engine = jit.compile_scf(out / "scf.mlir", tmp_path / "failure", cfg.lowering.register_block)
    results = jit.invoke(engine, signature["function"], args, signature["outputs"])
    assert len(results) == len(expected) == 2  # the output and the cache's new value
    for got, want in zip(results, expected, strict=True):
        assert np.allclose(got, want, rtol=1e-5, atol=1e-6)
    frontend.materialize(params.model, signature)
    assert len(forwards) == 1  # kept for the process


def test_weights_as_constants_match_eager(tmp_path: Path) -> None:
    cfg, params, out = _lower(tmp_path, ["model=mlp", "model.size.hidden=16",
                                         "model.size.ffn=32", "lowering.weights=constants"])
    signature = json.loads((out / "signature.json").read_text())
    assert [a["kind"] for a in signature["args"]] == ["input"]
    engine = jit.compile_scf(out / "scf.mlir", tmp_path / "failure", cfg.lowering.register_block)
    args, expected = frontend.materialize(params.model, signature)
    (got,) = jit.invoke(engine, signature["function"], args, signature["outputs"])
    assert np.allclose(got, expected[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("model", "nests"), [("softmax", 6), ("layernorm", 6)])
def test_full_fusion_matches_eager(tmp_path: Path, model: str, nests: int) -> None:
    cfg, params, out = _lower(tmp_path, [f"model={model}", "lowering.fusion=full"])
    signature = json.loads((out / "signature.json").read_text())
    found = loops.extract(out / "scf.mlir", signature)["candidates"]
    # softmax: exp has two users, so MLIR's fusion leaves it alone as controlled fusion does;
    # layernorm: elementwise producers fuse into its reductions.
    assert len(found) == nests <= GOLDEN_NESTS[model][1]
    engine = jit.compile_scf(out / "scf.mlir", tmp_path / "failure", cfg.lowering.register_block)
    args, expected = frontend.materialize(params.model, signature)
    (got,) = jit.invoke(engine, signature["function"], args, signature["outputs"])
    assert np.allclose(got, expected[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("shape", "dims", "keepdim", "dtype"), [
    ((96, 5), [0], False, None),  # one long dimension, in blocks
    ((96, 5), [0], True, torch.float64),
    ((4, 6, 8), [-2, -1], False, None),  # two dimensions, one at a time
    ((3, 6, 8), None, True, None),  # every dimension
    ((2, 2, 96), [1, 2], False, None),  # both at once: blocks of the long one too
])
def test_long_sums_are_summed_in_levels(monkeypatch, shape, dims, keepdim, dtype) -> None:
    # frontend.decompose._long_sum with its bounds made small: the same sums in levels, each fewer
    # than LONG_SUM terms; short sums, integers and a long dimension no block divides are
    # torch-mlir's own.
    monkeypatch.setattr(frontend.decompose, "LONG_SUM", 32)
    monkeypatch.setattr(frontend.decompose, "SUM_BLOCK", 8)
    x = torch.rand(shape, dtype=torch.float64)
    got = frontend.decompose._long_sum(x, dims, keepdim, dtype=dtype)
    assert got is not NotImplemented
    want = x.sum(dim=dims if dims is not None else list(range(x.ndim)), keepdim=keepdim,
                 dtype=dtype)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want)
    mean = frontend.decompose._long_mean(x, dims, keepdim, dtype=dtype)
    torch.testing.assert_close(mean, x.mean(dim=dims if dims is not None else None,
                                            keepdim=keepdim, dtype=dtype)
                               if dims is not None else x.mean().reshape(want.shape))
    assert frontend.decompose._long_sum(torch.rand(31), [0]) is NotImplemented  # short
    assert frontend.decompose._long_sum(torch.rand(37), [0]) is NotImplemented  # a prime length
    odd = torch.rand(35, dtype=torch.float64)  # in blocks of 7, the largest that divides 35
    torch.testing.assert_close(frontend.decompose._long_sum(odd, [0]), odd.sum(0))
    assert frontend.decompose._block(35) == 7 and frontend.decompose._block(37) is None
    assert frontend.decompose._long_sum(torch.ones(64, dtype=torch.int64), [0]) is NotImplemented


@pytest.mark.parametrize("recipe", ["long_sums", "long_scans"])
def test_long_sums_match_eager(tmp_path: Path, recipe: str) -> None:
    # Each sum of 2^18 terms near 1000 was one running sum: 1.1e-4 from eager for the
    # column sums (a float64 run: the same; eager's own 5e-8). In levels, within 1e-6. The
    # scans accumulate in float64 as ATen's do (the cumulative sum was 3.0e-5 from eager).
    cfg, params, out = _lower(tmp_path, ["model=relu", f"model.recipe=tests.odd_recipes:{recipe}",
                                         "model.size={n:64}"])
    signature = json.loads((out / "signature.json").read_text())
    engine = jit.compile_scf(out / "scf.mlir", tmp_path / "failure", cfg.lowering.register_block)
    args, expected = frontend.materialize(params.model, signature)
    got = jit.invoke(engine, signature["function"], args, signature["outputs"])
    exact = frontend.reference64(params.model, signature)
    for g, e, x in zip(got, expected, exact, strict=True):
        assert check.difference(g, e) <= 1e-6
        assert check.difference(g.astype(np.float64), x) <= 2 * check.difference(
            e.astype(np.float64), x) + 1e-7


def _run_lowered(tmp_path: Path, recipe: str, overrides: tuple[str, ...] = ()
                 ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The lowered program's results and eager's for a recipe of tests/odd_recipes.py."""
    cfg, params, out = _lower(tmp_path, ["model=relu", f"model.recipe=tests.odd_recipes:{recipe}",
                                         "model.size={n:8}", *overrides])
    signature = json.loads((out / "signature.json").read_text())
    engine = jit.compile_scf(out / "scf.mlir", tmp_path / "failure", cfg.lowering.register_block)
    args, expected = frontend.materialize(params.model, signature)
    return jit.invoke(engine, signature["function"], args, signature["outputs"]), expected


def test_scalar_operands_take_the_tensor_overload(tmp_path: Path) -> None:
    # torch-mlir 20261001 has no aten.bitwise_or.Scalar, bitwise_xor.Scalar or
    # bucketize.Scalar: lowering stopped at the first ("cannot lower").
    assert torch.ops.aten.bitwise_or.Scalar in frontend.tensor_overloads()
    assert torch.ops.aten.add.Scalar not in frontend.tensor_overloads()  # torch-mlir has it
    got, expected = _run_lowered(tmp_path, "scalar_operands")
    assert [g.dtype for g in got] == [np.int64] * 4
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and np.array_equal(g, e)


def test_comparisons_with_a_number_of_the_other_kind(tmp_path: Path) -> None:
    got, expected = _run_lowered(tmp_path, "constant_comparisons")
    assert [g.dtype for g in got] == [np.bool_] * 5 + [np.float32, np.bool_, np.float32]
    for g, e in zip(got, expected, strict=True):
        assert np.array_equal(g, e)
    assert float(got[-1]) > 1.0  # the target is 1: the loss is 1 - cos(x, -x) = 2


def test_constants_are_computed_by_pytorch(tmp_path: Path) -> None:
    got, expected = _run_lowered(tmp_path, "constant_arithmetic")
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and np.array_equal(g, e)
    recipe = odd_recipes.constant_arithmetic(8)
    prog = torch.export.export(recipe.module, tuple(recipe.inputs.values()))
    prog = prog.run_decompositions(frontend.decompositions())
    assert frontend.fold_splat_constants(prog) > 0
    names = [n.target.name() for n in prog.graph.nodes if n.op == "call_function"]
    assert not set(names) & {"aten::sign", "aten::floor_divide", "aten::div.Tensor_mode",
                             "aten::pow.Tensor_Scalar"}, names
    # the arange's chain is not a splat: left as it was, its remainder the only one
    assert "aten::arange.start_step" in names and names.count("aten::remainder.Scalar") == 1


def test_negative_padding_crops(tmp_path: Path) -> None:
    # Lowering stopped in bufferization ("expected offsets to be non-negative").
    got, expected = _run_lowered(tmp_path, "negative_padding")
    assert [g.shape for g in got] == [(1, 2, 10, 9), (1, 2, 8, 7)]
    for g, e in zip(got, expected, strict=True):
        assert np.array_equal(g, e)


def test_ops_torch_mlir_lacks_are_substituted(tmp_path: Path) -> None:
    # Each stopped lower: "no definition of torch.aten.searchsorted.Tensor" / "median.dim" /
    # "sort.stable", "failed to legalize operation 'torch.aten.erfinv'", copysign's signbit.
    got, expected = _run_lowered(tmp_path, "substituted_ops")
    for g, e in zip(got[:-1], expected[:-1], strict=True):
        assert g.dtype == e.dtype and np.array_equal(g, e, equal_nan=g.dtype.kind == "f")
    for g, e in zip(got[-4:-1], expected[-4:-1], strict=True):  # copysign: zeros' signs
        number = ~np.isnan(e)  # a NaN's sign bit may differ (substitutes._signbit)
        assert np.array_equal(np.signbit(g[number]), np.signbit(e[number]))
    np.testing.assert_allclose(got[-1], expected[-1], rtol=1e-5)  # erfinv: inf and NaN too


@pytest.mark.parametrize("recipe", ["embedding_bags", "distances"])
def test_modules_torch_mlir_lacks_are_substituted(tmp_path: Path, recipe: str) -> None:
    # "cannot lower aten._embedding_bag" (a recommendation model's pooled lookups) and
    # "aten._cdist_forward".
    got, expected = _run_lowered(tmp_path, recipe)
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)
    if recipe == "embedding_bags":
        assert not expected[0][0].any() and not expected[1][1].any()  # all padding; empty


@pytest.mark.parametrize("recipe", ["outputs_computed_alike", "nan_propagation"])
def test_outputs_computed_alike_and_nan_as_aten(tmp_path: Path, recipe: str) -> None:
    # Returned twice after CSE, the value crashed bufferization (transforms.distinct_results);
    # maximum was select(a > b, a, b), which drops a NaN in a, the clamps returned a bound
    # for NaN, and argmax passed over a NaN (substitutes._maximum, _clamp, _arg_extreme).
    # Floats within an ulp: hardsigmoid's x / 6 runs as x * (1 / 6) (vecmath.reciprocals),
    # where ATen's kernel divides; NaN exactly where eager has it.
    got, expected = _run_lowered(tmp_path, recipe)
    for g, e in zip(got, expected, strict=True):
        e = np.asarray(e)
        assert g.dtype == e.dtype and g.shape == e.shape
        if g.dtype.kind != "f":
            assert np.array_equal(g, e)
            continue
        assert np.array_equal(np.isnan(g), np.isnan(e))
        np.testing.assert_array_max_ulp(g[~np.isnan(g)], e[~np.isnan(e)], maxulp=1)
    if recipe == "outputs_computed_alike":
        assert np.isnan(got[2]).sum() == 6  # NaN where either is
    else:
        assert list(got[6][:3]) == [1, 0, 0] and np.isnan(got[0]).sum() == 6


@pytest.mark.parametrize(("recipe", "weights"), [
    ("rotary_complex", "args"), ("rotary_complex", "constants"), ("complex_arithmetic", "args")])
def test_complex_tensors_lower_as_pairs_of_reals(tmp_path: Path, recipe: str,
                                                 weights: str) -> None:
    # Every complex value stopped export ("computes a complex64 tensor"), Meta's rotary
    # embedding among them; under lowering.weights=constants its non-persistent buffer also
    # stopped torch-mlir's importer ("Could not find state mapping for buffer").
    got, expected = _run_lowered(tmp_path, recipe, (f"lowering.weights={weights}",))
    assert "complex<" not in (tmp_path / "lower" / "torch.mlir").read_text()  # no such type
    # the projection viewed as pairs stays a matmul: it was expanded into a contraction with
    # an innermost loop of 2 (transforms._protect_reduction_results)
    linalg = (tmp_path / "lower" / "linalg.mlir").read_text().splitlines()
    contractions = [line for line in linalg if "linalg.generic" in line and "reduction" in line]
    assert not [line for line in contractions if re.search(r"outs\(.*x2xf32>\)", line)]
    for g, e in zip(got, expected, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)
    if recipe == "complex_arithmetic":  # its complex outputs, as view_as_real of them
        assert [e.shape[-1] for e in expected] == [2, 8, 2]


@pytest.mark.parametrize("recipe", ["offset_layer_norm", "group_norm", "bfloat16_layer_norm"])
def test_norms_compute_their_moments_in_float32(tmp_path: Path, recipe: str) -> None:
    # frontend.decompositions: no float64 copy of the input (torch-mlir's var_mean), and the
    # results as close to eager as the check requires.
    cfg, params, out = _lower(tmp_path, ["model=relu", f"model.recipe=tests.odd_recipes:{recipe}",
                                         "model.size={n:64}"])
    assert "xf64>" not in (out / "linalg.mlir").read_text()
    signature = json.loads((out / "signature.json").read_text())
    engine = jit.compile_scf(out / "scf.mlir", tmp_path / "failure", cfg.lowering.register_block)
    args, expected = frontend.materialize(params.model, signature)
    got = jit.invoke(engine, signature["function"], args, signature["outputs"])
    for g, e in zip(got, expected, strict=True):
        assert check.difference(g, e) <= check.tolerance(signature)
