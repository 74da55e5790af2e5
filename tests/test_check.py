"""reinsert's check against eager cannot pass vacuously, and keeps every output's dtype."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pimbuild.check import RTOL, difference
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


def test_outputs_of_every_supported_dtype_go_through_every_stage(run_build) -> None:
    result = run_build(["model=relu", "model.recipe=tests.odd_recipes:mixed_dtypes",
                        "model.size={n:64}", "profile.backend=timer",
                        "policy=oracle"])
    sig = json.loads((artifact_dir(result, "lower") / "signature.json").read_text())
    assert [o["dtype"] for o in sig["outputs"]] == ["float64", "int32", "int64", "bool"]
    check = json.loads((artifact_dir(result, "reinsert") / "reinsert.json").read_text())
    assert check["check"]["max_rel_error"] <= RTOL


@pytest.mark.parametrize("recipe", ["tensor_constant", "empty_output", "with_nan",
                                    "only_empty", "running_sum", "scatter_rows",
                                    "sorted_values", "cached_step", "nested_outputs",
                                    "tensor_literal", "returns_input"])
def test_unusual_models_go_through_every_stage(run_build, recipe: str) -> None:
    result = run_build(["model=relu", f"model.recipe=tests.odd_recipes:{recipe}",
                        "model.size={n:64}", "profile.backend=timer"])
    check = json.loads((artifact_dir(result, "reinsert") / "reinsert.json").read_text())
    assert check["check"]["max_rel_error"] <= RTOL
    assert (artifact_dir(result, "simulate") / "report.md").is_file()


def test_tm_tensor_ir_parses_again(run_build) -> None:
    """IR with TMTensor ops (cumsum's scan) round-trips, so repro commands work on it."""
    from pimbuild import mlir

    result = run_build(["model=relu", "model.recipe=tests.odd_recipes:running_sum",
                        "model.size={n:64}", "targets=[lower]"])
    linalg = artifact_dir(result, "lower") / "linalg.mlir"
    assert "tm_tensor.scan" in linalg.read_text()
    assert "tm_tensor.scan" in mlir.asm(mlir.parse_file(linalg))
