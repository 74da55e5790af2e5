"""An operand read across its rows, copied so each row's reduction is contiguous
(pimbuild.codegen.relayout)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pimbuild.codegen import jit, relayout
from pimbuild.frontend import mlir
from pimbuild.targets.offload import instrument
from tests.test_codegen import LINEAR, XW, parse

# Attention's output a[h, i, d] read as the output projection's x[i, h * D + d]:
# y[0, i, j] = sum over h, d of a[0, h, i, d] W[j, h, d].
HEADS = """
func.func @mv(%a: memref<1x${H}x${I}x${D}xf32>, %W: memref<${J}x${H}x${D}xf32>,
              %y: memref<1x${I}x${J}xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %cH = arith.constant ${H} : index
  %cI = arith.constant ${I} : index
  %cJ = arith.constant ${J} : index
  %cD = arith.constant ${D} : index
  scf.parallel (%p, %i, %j) = (%c0, %c0, %c0) to (%c1, %cI, %cJ) step (%c1, %c1, %c1) {
    scf.for %h = %c0 to %cH step %c1 {
      scf.for %d = %c0 to %cD step %c1 {
        %0 = memref.load %a[%p, %h, %i, %d] : memref<1x${H}x${I}x${D}xf32>
        %1 = memref.load %W[%j, %h, %d] : memref<${J}x${H}x${D}xf32>
        %2 = memref.load %y[%p, %i, %j] : memref<1x${I}x${J}xf32>
        %3 = arith.mulf %0, %1 fastmath<reassoc,contract> : f32
        %4 = arith.addf %2, %3 fastmath<reassoc,contract> : f32
        memref.store %4, %y[%p, %i, %j] : memref<1x${I}x${J}xf32>
      }
    }
    scf.reduce
  }
  return
}
"""
DIMS = {"H": 4, "I": 96, "D": 8, "J": 32}


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Copies for operands of any size (the tests' are a few KiB)."""
    monkeypatch.setattr(relayout, "MIN_BYTES", 0)


def heads_args(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    h, i, d, j = DIMS["H"], DIMS["I"], DIMS["D"], DIMS["J"]
    a = rng.standard_normal((1, h, i, d)).astype(np.float32)
    w = rng.standard_normal((j, h, d)).astype(np.float32)
    want = np.einsum("hid,jhd->ij", a[0], w)[None]
    return a, w, want


def test_rows_read_across_heads_get_a_copy(small: None) -> None:
    module = parse(HEADS, **DIMS)
    assert relayout.relayout(module) == 1
    text = str(module)
    assert "memref<1x96x4x8xf32>" in text  # the others (unit, rows), then h and d
    assert text.count("memref.load %arg0") == 1  # only the copy reads a now
    nest = [op for op in mlir.walk(module.operation) if op.name == "scf.parallel"][0]
    assert int(str(nest.attributes[relayout.RELAYOUT_ATTR]).split(":")[0]) == 1


@pytest.mark.parametrize("copy", [False, True])
def test_copied_operand_computes_the_same_values(small: None, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 copy: bool) -> None:
    monkeypatch.setattr(relayout, "COPY", copy)
    a, w, want = heads_args()
    module = parse(HEADS, **DIMS)
    done = jit.to_llvm(module, 8, stage="test", failure_dir=tmp_path / "failure")
    (y,) = jit.invoke(jit.engine_of(module), "mv", [a, w],
                      [{"shape": [1, DIMS["I"], DIMS["J"]], "dtype": "float32"}])
    assert done["relaid_out_nests"] == int(copy)
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("text", [XW, LINEAR], ids=["x@W", "linear"])
def test_reductions_already_together_are_left_alone(small: None, text: str) -> None:
    """x[i, k], W[k, j] and W[j, k]: no parallel index between two reduction indices."""
    module = parse(text, I=64, J=32, K=16)
    before = str(module)
    assert relayout.relayout(module) == 0
    assert str(module) == before


def test_small_operand_is_left_alone() -> None:
    """Under MIN_BYTES (the L2 holds it, and the order costs little) nothing is copied."""
    assert 1 * 4 * 96 * 8 * 4 < relayout.MIN_BYTES
    assert relayout.relayout(parse(HEADS, **DIMS)) == 0


def test_operand_the_nest_writes_is_left_alone(small: None) -> None:
    written = HEADS.replace(
        "memref.store %4, %y[%p, %i, %j] : memref<1x${I}x${J}xf32>",
        "memref.store %4, %y[%p, %i, %j] : memref<1x${I}x${J}xf32>\n"
        "        memref.store %4, %a[%p, %h, %i, %d] : memref<1x${H}x${I}x${D}xf32>")
    assert relayout.relayout(parse(written, **DIMS)) == 0


def test_nest_inside_a_loop_is_left_alone(small: None) -> None:
    """A copy there would run once an iteration."""
    looped = HEADS.replace("  scf.parallel", "  scf.for %t = %c0 to %c1 step %c1 {\n"
                           "  scf.parallel").replace("  return", "  }\n  return")
    assert relayout.relayout(parse(looped, **DIMS)) == 0


def test_operand_read_once_is_left_alone(small: None) -> None:
    """With one column, each element of a is read once: a copy would only add a read and a
    write (a decode step's weight read across heads would double its traffic)."""
    assert relayout.relayout(parse(HEADS, **{**DIMS, "J": 1})) == 0
    assert relayout.relayout(parse(HEADS, **{**DIMS, "J": relayout.MIN_REUSE})) == 1


def test_operand_the_nest_writes_through_a_view_is_left_alone(small: None) -> None:
    """The store names another view of a's buffer: it is the same memory."""
    aliased = HEADS.replace(
        "  scf.parallel",
        "  %v = memref.collapse_shape %a [[0, 1], [2], [3]] : memref<1x${H}x${I}x${D}xf32> "
        "into memref<${H}x${I}x${D}xf32>\n  scf.parallel", 1).replace(
        "memref.store %4, %y[%p, %i, %j] : memref<1x${I}x${J}xf32>",
        "memref.store %4, %y[%p, %i, %j] : memref<1x${I}x${J}xf32>\n"
        "        memref.store %4, %v[%h, %i, %d] : memref<${H}x${I}x${D}xf32>")
    assert relayout.relayout(parse(aliased, **DIMS)) == 0


def test_profile_still_finds_the_rows_of_a_nest_given_a_copy(small: None) -> None:
    """The copy sits between the nest's marker and the nest: ``nest_marks`` looks past it
    (without the rows, footprint charged the 1020-token projection's weight once a row:
    178 GB/s, and C3 offloaded it)."""
    module = parse(HEADS, **DIMS)
    instrument.insert_markers(module, "mv", 1)
    done, rows, columns = instrument.generate(module, 8, "test", Path("/nonexistent"))
    assert (done["relaid_out_nests"], done["packed_nests"]) == (1, 1)
    assert rows == {0: DIMS["I"]} and columns == {0: 16}
