"""Calling a compiled forward: memref descriptors of any rank, prepared calls reused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from torch_mlir import ir
from torch_mlir.execution_engine import ExecutionEngine

from pimbuild.codegen import jit
from pimbuild.frontend import mlir

# y[i, j] = x[i, j] * s + i: a matrix, a rank-0 scalar and one output.
SCALE = """
func.func @f(%x: memref<4x3xf32>, %s: memref<f32>, %y: memref<4x3xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %s0 = memref.load %s[] : memref<f32>
  scf.for %i = %c0 to %c4 step %c1 {
    %ii = arith.index_cast %i : index to i32
    %fi = arith.sitofp %ii : i32 to f32
    scf.for %j = %c0 to %c3 step %c1 {
      %v = memref.load %x[%i, %j] : memref<4x3xf32>
      %m = arith.mulf %v, %s0 : f32
      %r = arith.addf %m, %fi : f32
      memref.store %r, %y[%i, %j] : memref<4x3xf32>
    }
  }
  return
}
"""
OUTPUTS = [{"shape": [4, 3], "dtype": "float32"}]


def engine(tmp_path: Path) -> ExecutionEngine:
    module = ir.Module.parse(SCALE, ir.Context())
    jit.prepare_for_llvm(module)
    mlir.run_pipeline(module, jit.SCF_TO_LLVM, stage="test", failure_dir=tmp_path / "failure")
    return ExecutionEngine(module, opt_level=3)


def expected(x: np.ndarray, s: float) -> np.ndarray:
    return x * np.float32(s) + np.arange(4, dtype=np.float32)[:, None]


def test_invoke_passes_matrices_and_scalars(tmp_path: Path) -> None:
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    (y,) = jit.invoke(engine(tmp_path), "f", [x, np.array(2.5, dtype=np.float32)], OUTPUTS)
    np.testing.assert_array_equal(y, expected(x, 2.5))


def test_prepared_call_reads_a_strided_argument_through_its_copy(tmp_path: Path) -> None:
    x = np.arange(12, dtype=np.float32).reshape(3, 4).T  # not C-contiguous: prepare copies it
    call, (y,) = jit.prepare(engine(tmp_path), "f", [x, np.array(-1.0, dtype=np.float32)],
                             OUTPUTS)
    del x  # the copy the descriptor points into must outlive this name
    for _ in range(3):
        y.fill(0)
        call()
        np.testing.assert_array_equal(
            y, expected(np.arange(12, dtype=np.float32).reshape(3, 4).T, -1.0))


def test_descriptor_classes_are_made_once_per_rank_and_type() -> None:
    """A class per call is what ctypes' pointer-type cache kept forever (hundreds of MB over a
    test run); arrays of one rank and element type share one class."""
    a, b = np.zeros((2, 5), np.float32), np.ones((7, 1), np.float32)
    assert type(jit.descriptor(a)) is type(jit.descriptor(b))
    assert type(jit.descriptor(a)) is not type(jit.descriptor(a[0]))
    assert type(jit.descriptor(a)) is not type(jit.descriptor(a.astype(np.int64)))
    d = jit.descriptor(b)
    assert list(d.shape) == [7, 1] and list(d.strides) == [1, 1]
