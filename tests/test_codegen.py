"""Register blocking of reduction nests (pimbuild/codegen/blocking.py): which nests it rewrites,
what the rewritten loop looks like, and that the compiled code computes the same values."""

from __future__ import annotations

import re
from pathlib import Path
from string import Template
from unittest import mock

import numpy as np
import pytest
from torch_mlir import ir
from torch_mlir.execution_engine import ExecutionEngine

from pimbuild.codegen import blocking, jit, vectile
from pimbuild.frontend import mlir

# y[i, j] = sum_k x[i, k] * W[j, k] as convert-linalg-to-parallel-loops writes nn.Linear on
# ${I} rows: zero the accumulator, then one nest parallel over (i, j), sequential over k.
LINEAR = """
func.func @mv(%x: memref<${I}x${K}xf32>, %W: memref<${J}x${K}xf32>, %y: memref<${I}x${J}xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %cI = arith.constant ${I} : index
  %cJ = arith.constant ${J} : index
  %cK = arith.constant ${K} : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%i, %j) = (%c0, %c0) to (%cI, %cJ) step (%c1, %c1) {
    memref.store %zero, %y[%i, %j] : memref<${I}x${J}xf32>
    scf.reduce
  }
  scf.parallel (%i, %j) = (%c0, %c0) to (%cI, %cJ) step (%c1, %c1) {
    scf.for %k = %c0 to %cK step %c1 {
      %0 = memref.load %x[%i, %k] : memref<${I}x${K}xf32>
      %1 = memref.load %W[%j, %k] : memref<${J}x${K}xf32>
      %2 = memref.load %y[%i, %j] : memref<${I}x${J}xf32>
      %3 = arith.mulf %0, %1 fastmath<reassoc,contract> : f32
      %4 = arith.addf %2, %3 fastmath<reassoc,contract> : f32
      memref.store %4, %y[%i, %j] : memref<${I}x${J}xf32>
    }
    scf.reduce
  }
  return
}
"""
# One row: a matrix-vector product (a decode step).
MATVEC = LINEAR.replace("${I}", "1").replace("  %cI = arith.constant 1 : index\n", "") \
    .replace("%cI", "%c1")

# The same product with the reduction split over two loops (k = 4a + b) and the rows
# parallel in the outer dimension, as a reshape fused into a projection lowers.
SPLIT_K = """
func.func @mv(%x: memref<4x8xf32>, %W: memref<${J}x4x8xf32>, %y: memref<${J}x1xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %cJ = arith.constant ${J} : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%j, %i) = (%c0, %c0) to (%cJ, %c1) step (%c1, %c1) {
    memref.store %zero, %y[%j, %i] : memref<${J}x1xf32>
    scf.reduce
  }
  scf.parallel (%j, %i) = (%c0, %c0) to (%cJ, %c1) step (%c1, %c1) {
    scf.for %a = %c0 to %c4 step %c1 {
      scf.for %b = %c0 to %c8 step %c1 {
        %0 = memref.load %x[%a, %b] : memref<4x8xf32>
        %1 = memref.load %W[%j, %a, %b] : memref<${J}x4x8xf32>
        %2 = memref.load %y[%j, %i] : memref<${J}x1xf32>
        %3 = arith.mulf %0, %1 : f32
        %4 = arith.addf %2, %3 : f32
        memref.store %4, %y[%j, %i] : memref<${J}x1xf32>
      }
    }
    scf.reduce
  }
  return
}
"""

# y[i, j] = sum_k x[i, k] * W[k, j]: x @ W with W stored (K, N), as GPT-2's Conv1D and
# torch.matmul with a weight lower; the reduction loop strides down a column of W.
XW = LINEAR.replace("%W: memref<${J}x${K}xf32>", "%W: memref<${K}x${J}xf32>") \
    .replace("%W[%j, %k] : memref<${J}x${K}xf32>", "%W[%k, %j] : memref<${K}x${J}xf32>")

# Two sums per row (of W and of W squared, as a norm computes), into $A and $B.
TWO_SUMS = """
func.func @mv(%W: memref<32x16xf32>, %s: memref<2x32xf32>, %t: memref<2x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  scf.parallel (%j) = (%c0) to (%c32) step (%c1) {
    scf.for %k = %c0 to %c16 step %c1 {
      %w = memref.load %W[%j, %k] : memref<32x16xf32>
      %a = memref.load ${A}[%c0, %j] : memref<2x32xf32>
      %sa = arith.addf %a, %w : f32
      memref.store %sa, ${A}[%c0, %j] : memref<2x32xf32>
      %b = memref.load ${B}[%c1, %j] : memref<2x32xf32>
      %w2 = arith.mulf %w, %w : f32
      %sb = arith.addf %b, %w2 : f32
      memref.store %sb, ${B}[%c1, %j] : memref<2x32xf32>
    }
    scf.reduce
  }
  return
}
"""


def parse(text: str, **dims: int) -> ir.Module:
    return ir.Module.parse(Template(text).substitute(dims), context=mlir.new_context())


def run(module: ir.Module, factor: int, args: list[np.ndarray], out_shape: tuple,
        tmp_path: Path) -> tuple[int, np.ndarray]:
    """Block, compile and call @mv; returns how many nests were blocked and the output.
    Vector tiles (``vectile``, tested on their own) are switched off."""
    with mock.patch.object(vectile, "tile", lambda m: 0):
        done = jit.to_llvm(module, factor, stage="test", failure_dir=tmp_path / "failure")
    engine = ExecutionEngine(module, opt_level=3)
    (y,) = jit.invoke(engine, "mv", args, [{"shape": list(out_shape), "dtype": "float32"}])
    return done["register_blocked_nests"] + done["interchanged_nests"], y


def test_matvec_rows_are_jammed_with_accumulators_in_registers() -> None:
    module = parse(MATVEC, J=64, K=32)
    assert blocking.register_block(module, 16) == 1
    text = str(module)
    # The zeroing nest has no reduction loop and stays as it was.
    assert text.count("step (%c1, %c1)") == 1
    # The reduction nest steps over 16 rows; one loop carries their 16 sums.
    assert re.search(r"to \(%c1, %c64\) step \(%c1, %c16\)", text)
    (header,) = re.findall(r"scf\.for .* iter_args\((.*)\) -> \((.*)\) \{", text)
    assert header[1].split(", ") == ["f32"] * 16
    # Each sum is loaded once before the loop and stored once after it, never inside it.
    loop = text[text.index("iter_args"):text.index("scf.yield")]
    assert "memref.load %arg2" not in loop and "memref.store" not in loop
    assert text.count("memref.store") == 1 + 16


def test_factor_divides_the_trip_count() -> None:
    module = parse(MATVEC, J=6, K=8)
    assert blocking.register_block(module, 16) == 1
    assert "step (%c1, %c2)" in str(module)


@pytest.mark.parametrize("factor", [0, 1])
def test_factor_one_changes_nothing(factor: int) -> None:
    module = parse(MATVEC, J=64, K=32)
    before = str(module)
    assert blocking.register_block(module, factor) == 0
    assert str(module) == before


def test_nest_whose_accumulator_is_read_elsewhere_is_left_alone() -> None:
    # y[i, j] += y[i, k]: the loop reads the buffer it accumulates into at moving addresses,
    # so keeping the sums in registers would change what those reads see.
    text = MATVEC.replace("%0 = memref.load %x[%i, %k] : memref<1x${K}xf32>",
                          "%0 = memref.load %y[%i, %k] : memref<1x${J}xf32>")
    module = parse(text, J=32, K=32)
    before = str(module)
    assert blocking.register_block(module, 16) == 0
    assert str(module) == before


def test_two_sums_share_the_factor() -> None:
    module = parse(TWO_SUMS, A="%s", B="%t")
    assert blocking.register_block(module, 16) == 1
    (header,) = re.findall(r"scf\.for .* -> \((.*)\) \{", str(module))
    assert header.split(", ") == ["f32"] * 16  # 8 rows x 2 sums


def test_two_sums_in_one_buffer_are_left_alone() -> None:
    module = parse(TWO_SUMS, A="%s", B="%s")
    assert blocking.register_block(module, 16) == 0


def test_unit_parallel_dimensions_are_skipped() -> None:
    # The rows are the outer dimension, the inner one has a single iteration (gemv's layout).
    module = parse(SPLIT_K, J=32)
    assert blocking.register_block(module, 8) == 1
    assert re.search(r"to \(%c32, %c1\) step \(%c8(_\d+)?, %c1\)", str(module))


@pytest.mark.parametrize("factor", [1, 4, 16])
def test_blocked_matvec_computes_the_same_values(tmp_path: Path, factor: int) -> None:
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 96)).astype(np.float32), \
        rng.standard_normal((48, 96)).astype(np.float32)
    blocked, y = run(parse(MATVEC, J=48, K=96), factor, [x, w], (1, 48), tmp_path)
    assert blocked == (factor > 1)
    np.testing.assert_allclose(y, x @ w.T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("factor", [1, 8])
def test_blocked_split_reduction_computes_the_same_values(tmp_path: Path, factor: int) -> None:
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((4, 8)).astype(np.float32), \
        rng.standard_normal((24, 4, 8)).astype(np.float32)
    blocked, y = run(parse(SPLIT_K, J=24), factor, [x, w], (24, 1), tmp_path)
    assert blocked == (factor > 1)
    np.testing.assert_allclose(y[:, 0], np.einsum("ab,jab->j", x, w), rtol=1e-5, atol=1e-5)


def test_column_strided_product_runs_its_reduction_outside() -> None:
    """x @ W with W stored (K, N): the reduction loop goes outside j, which becomes the
    innermost loop over W's row, with 4 rows of x per iteration reading that row once and
    TERMS (4) terms of each sum per iteration: the accumulators loaded and stored once for
    them, x's loads before the j loop; nn.Linear's layout (MATVEC) is left to register
    blocking."""
    module = parse(XW, I=4, J=64, K=32)
    assert blocking.interchange(module) == 1
    text = str(module)
    assert re.search(r"to \(%c4, %c64\) step \(%c4(_\d+)?, %c64(_\d+)?\)", text)
    k = re.search(r"scf.for (%arg\d+) = %c0 to %c32 step %c4\S* ", text)
    j = re.search(r"scf.for (%arg\d+) = %c0\S* to %c64\S* ", text)
    assert k and j and k.start() < j.start()  # the reduction loop outside, j innermost
    w_loads = [m.start() for m in re.finditer(r"memref.load %arg1\[", text)]
    x_loads = [m.start() for m in re.finditer(r"memref.load %arg0\[", text)]
    assert len(w_loads) == 4 and min(w_loads) > j.start()  # a row of W per term, shared
    assert len(x_loads) == 16 and k.start() < min(x_loads) < max(x_loads) < j.start()
    stores = [m.start() for m in re.finditer(r"memref.store %\d+, %arg2\[", text)]
    assert text.count("memref.load %arg2[") == 4 and len(stores) == 4  # once per 4 terms
    assert min(stores) > max(w_loads)
    assert text.index(f"memref.load %arg1[{k[1]}, {j[1]}]") > j.start()
    assert blocking.register_block(module, 8) == 0  # nothing left for blocking
    linear = parse(MATVEC, J=64, K=32)
    assert blocking.interchange(linear) == 0 and blocking.register_block(linear, 8) == 1
    assert blocking.interchange(parse(XW, I=4, J=4, K=32)) == 0  # too short to vectorize


@pytest.mark.parametrize(("rows", "factor", "k"), [(3, 1, 40), (4, 8, 40), (6, 8, 40),
                                                 (4, 8, 6), (4, 8, 5)])
def test_interchanged_product_computes_the_same_values(tmp_path: Path, rows: int,
                                                       factor: int, k: int) -> None:
    """K = 40, 6, 5: 4, 2 and 1 terms per pass over the columns (``_unroll``)."""
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((rows, k)).astype(np.float32), \
        rng.standard_normal((k, 24)).astype(np.float32)
    changed, y = run(parse(XW, I=rows, J=24, K=k), factor, [x, w], (rows, 24), tmp_path)
    assert changed == 1
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)


def rows_attr(module: ir.Module) -> list[int]:
    return [ir.IntegerAttr(op.attributes[blocking.ROWS_ATTR]).value
            for op in mlir.walk(module.operation) if blocking.ROWS_ATTR in op.attributes]


def test_column_strided_rows_run_inside_blocks_of_columns(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """x @ W whose W (32 x 64 floats, 8 KiB) is past COLUMN_BLOCK_BYTES: blocks of 16
    columns (2 KiB of W each), the rows inside them (pimbuild.rows: every row), and the
    innermost loop over the block's columns; the same values."""
    monkeypatch.setattr(blocking, "COLUMN_BLOCK_BYTES", 2048)
    module = parse(XW, I=8, J=64, K=32)
    assert blocking.interchange(module) == 1
    text = str(module)
    assert re.search(r"to \(%c64, %c8\) step \(%c16(_\d+)?, %c4(_\d+)?\)", text)
    assert rows_attr(module) == [8]
    header = re.search(r"scf\.parallel \((%\w+), (%\w+)\) = .* to \(%c64, %c8\)", text)
    outer, inner = header.groups()
    assert re.search(rf"scf\.for %\w+ = {outer} to %\w+ step", text)  # from the block's first
    assert re.search(rf"memref\.load %arg0\[{inner}, ", text)  # x[i, k]: rows inside
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((8, 32)).astype(np.float32), \
        rng.standard_normal((32, 64)).astype(np.float32)
    changed, y = run(parse(XW, I=8, J=64, K=32), 8, [x, w], (8, 64), tmp_path)
    assert changed == 1
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)
    whole = parse(XW, I=8, J=64, K=32)  # W within the limit: one block, rows outside
    monkeypatch.setattr(blocking, "COLUMN_BLOCK_BYTES", 8192)
    assert blocking.interchange(whole) == 1
    assert re.search(r"to \(%c8, %c64\) step \(%c4(_\d+)?, %c64(_\d+)?\)", str(whole))


def test_rows_share_each_weight_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """With more than one row (nn.Linear on a few tokens), up to ROWS rows are jammed with
    the columns: 4 rows x 2 columns at factor 8, 8 accumulators as with one row. Past
    ROW_OPERAND_BYTES of x the rows stay outside the columns: the weight streams once per
    block of rows (pimbuild.rows: 4)."""
    monkeypatch.setattr(blocking, "ROW_OPERAND_BYTES", 4 * 32 * 4 - 1)  # x: 4 x 32 floats
    module = parse(LINEAR, I=4, J=64, K=32)
    assert blocking.register_block(module, 8) == 1
    text = str(module)
    assert re.search(r"to \(%c4, %c64\) step \(%c4(_\d+)?, %c2(_\d+)?\)", text)
    assert text.count("iter_args") == 1 and len(re.findall(r"memref\.store", text)) == 1 + 8
    assert rows_attr(module) == [4]
    two = parse(LINEAR, I=2, J=64, K=32)  # 2 rows: 2 x 4 (their x fits: rows innermost)
    assert blocking.register_block(two, 8) == 1
    assert re.search(r"to \(%c64, %c2\) step \(%c4(_\d+)?, %c2(_\d+)?\)", str(two))


def test_rows_run_innermost_when_their_operand_fits() -> None:
    """x of every row within ROW_OPERAND_BYTES: the columns run outside the rows, so each
    block of weight rows is loaded once for all of them (pimbuild.rows: every row)."""
    module = parse(LINEAR, I=8, J=64, K=32)
    assert blocking.register_block(module, 8) == 1
    text = str(module)
    assert re.search(r"to \(%c64, %c8\) step \(%c2(_\d+)?, %c4(_\d+)?\)", text)
    assert rows_attr(module) == [8]
    # The column index now comes from the outer dimension, the row index from the inner one.
    header = re.search(r"scf\.parallel \((%\w+), (%\w+)\) = .* to \(%c64, %c8\)", text)
    outer, inner = header.groups()
    assert re.search(rf"memref\.load %arg1\[{outer}, ", text)  # W[j, k]
    assert re.search(rf"memref\.load %arg0\[{inner}, ", text)  # x[i, k]


def test_an_odd_number_of_rows_runs_innermost_unjammed() -> None:
    """17 rows (ViT's tokens) cannot be jammed, but each block of weight rows is still
    loaded once for all of them."""
    module = parse(LINEAR, I=17, J=64, K=32)
    assert blocking.register_block(module, 8) == 1
    assert re.search(r"to \(%c64, %c17\) step \(%c8(_\d+)?, %c1\)", str(module))
    assert rows_attr(module) == [17]


# A 3x3 convolution: y[f, p, q] = sum_{c,a,b} x[c, p + a, q + b] * w[f, c, a, b]. Its rows
# (p) share the filter, which does not move with the output column (q).
CONV = """
func.func @mv(%x: memref<2x10x10xf32>, %w: memref<4x2x3x3xf32>, %y: memref<4x8x8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%f, %p, %q) = (%c0, %c0, %c0) to (%c4, %c8, %c8) step (%c1, %c1, %c1) {
    memref.store %zero, %y[%f, %p, %q] : memref<4x8x8xf32>
    scf.reduce
  }
  scf.parallel (%f, %p, %q) = (%c0, %c0, %c0) to (%c4, %c8, %c8) step (%c1, %c1, %c1) {
    scf.for %c = %c0 to %c2 step %c1 {
      scf.for %a = %c0 to %c3 step %c1 {
        scf.for %b = %c0 to %c3 step %c1 {
          %pa = arith.addi %p, %a : index
          %qb = arith.addi %q, %b : index
          %0 = memref.load %x[%c, %pa, %qb] : memref<2x10x10xf32>
          %1 = memref.load %w[%f, %c, %a, %b] : memref<4x2x3x3xf32>
          %2 = memref.load %y[%f, %p, %q] : memref<4x8x8xf32>
          %3 = arith.mulf %0, %1 : f32
          %4 = arith.addf %2, %3 : f32
          memref.store %4, %y[%f, %p, %q] : memref<4x8x8xf32>
        }
      }
    }
    scf.reduce
  }
  return
}
"""


def test_convolution_rows_stay_outside(tmp_path: Path) -> None:
    """A convolution's rows are jammed (they share the filter) but stay outside its columns:
    the filter does not move with the columns, so running the rows inside would save no
    weight traffic and only stride through the input."""
    module = ir.Module.parse(CONV, context=mlir.new_context())
    assert blocking.register_block(module, 8) == 1
    assert re.search(r"to \(%c4, %c8, %c8\) step \(%c1, %c4(_\d+)?, %c2(_\d+)?\)",
                     str(module))
    assert rows_attr(module) == [4]
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((2, 10, 10)).astype(np.float32), \
        rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    want = np.zeros((4, 8, 8), np.float32)
    for a in range(3):
        for b in range(3):
            want += np.einsum("cpq,fc->fpq", x[:, a:a + 8, b:b + 8], w[:, :, a, b])
    blocked, y = run(ir.Module.parse(CONV, context=mlir.new_context()), 8, [x, w],
                     (4, 8, 8), tmp_path)
    assert blocked == 1
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


# y[i, c, j] = sum_k x[i, k] * W[c, j, k]: a fused QKV projection's three chunks, which share
# x (and nothing else) and come between the tokens and the columns.
CHUNKS = """
func.func @mv(%x: memref<${I}x${K}xf32>, %W: memref<3x${J}x${K}xf32>,
              %y: memref<${I}x3x${J}xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %cI = arith.constant ${I} : index
  %cJ = arith.constant ${J} : index
  %cK = arith.constant ${K} : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%i, %c, %j) = (%c0, %c0, %c0) to (%cI, %c3, %cJ) step (%c1, %c1, %c1) {
    memref.store %zero, %y[%i, %c, %j] : memref<${I}x3x${J}xf32>
    scf.reduce
  }
  scf.parallel (%i, %c, %j) = (%c0, %c0, %c0) to (%cI, %c3, %cJ) step (%c1, %c1, %c1) {
    scf.for %k = %c0 to %cK step %c1 {
      %0 = memref.load %x[%i, %k] : memref<${I}x${K}xf32>
      %1 = memref.load %W[%c, %j, %k] : memref<3x${J}x${K}xf32>
      %2 = memref.load %y[%i, %c, %j] : memref<${I}x3x${J}xf32>
      %3 = arith.mulf %0, %1 fastmath<reassoc,contract> : f32
      %4 = arith.addf %2, %3 fastmath<reassoc,contract> : f32
      memref.store %4, %y[%i, %c, %j] : memref<${I}x3x${J}xf32>
    }
    scf.reduce
  }
  return
}
"""


# The same with four heads (an even count) and five tokens: the heads share x, the tokens W.
HEADS_X = CHUNKS.replace("%c3 = arith.constant 3", "%c4 = arith.constant 4") \
    .replace("%c3,", "%c4,").replace("3x${J}", "4x${J}")


def test_rows_that_share_the_weight_come_first(tmp_path: Path) -> None:
    """Of two dimensions whose rows could be jammed, the tokens (which share W, five: odd)
    are taken over the heads (which share only x, four: even), and run innermost."""
    module = parse(HEADS_X, I=5, J=16, K=24)
    assert blocking.register_block(module, 8) == 1
    assert re.search(r"to \(%c16, %c4, %c5\) step \(%c8(_\d+)?, %c1, %c1\)", str(module))
    assert rows_attr(module) == [5]
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((5, 24)).astype(np.float32), \
        rng.standard_normal((4, 16, 24)).astype(np.float32)
    blocked, y = run(parse(HEADS_X, I=5, J=16, K=24), 8, [x, w], (5, 4, 16), tmp_path)
    assert blocked == 1
    np.testing.assert_allclose(y, np.einsum("ik,cjk->icj", x, w), rtol=1e-5, atol=1e-5)


def test_rows_past_an_odd_dimension_are_jammed(tmp_path: Path) -> None:
    """The chunks (3, odd) are passed over for the tokens outside them, which share W."""
    module = parse(CHUNKS, I=8, J=16, K=24)
    assert blocking.register_block(module, 8) == 1
    assert rows_attr(module) == [8]
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((8, 24)).astype(np.float32), \
        rng.standard_normal((3, 16, 24)).astype(np.float32)
    blocked, y = run(parse(CHUNKS, I=8, J=16, K=24), 8, [x, w], (8, 3, 16), tmp_path)
    assert blocked == 1
    np.testing.assert_allclose(y, np.einsum("ik,cjk->icj", x, w), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("rows", "factor"), [(4, 8), (6, 8), (3, 4)])
def test_blocked_rows_compute_the_same_values(tmp_path: Path, rows: int, factor: int) -> None:
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((rows, 40)).astype(np.float32), \
        rng.standard_normal((24, 40)).astype(np.float32)
    blocked, y = run(parse(LINEAR, I=rows, J=24, K=40), factor, [x, w], (rows, 24), tmp_path)
    assert blocked == 1
    np.testing.assert_allclose(y, x @ w.T, rtol=1e-5, atol=1e-5)


# Attention scores per head: s[h, j] = sum_d q[h, d] * k[h, j, d]; heads share no operand.
HEADS = """
func.func @mv(%q: memref<4x16xf32>, %k: memref<4x32x16xf32>, %s: memref<4x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c16 = arith.constant 16 : index
  %c32 = arith.constant 32 : index
  scf.parallel (%h, %j) = (%c0, %c0) to (%c4, %c32) step (%c1, %c1) {
    scf.for %d = %c0 to %c16 step %c1 {
      %0 = memref.load %q[%h, %d] : memref<4x16xf32>
      %1 = memref.load %k[%h, %j, %d] : memref<4x32x16xf32>
      %2 = memref.load %s[%h, %j] : memref<4x32xf32>
      %3 = arith.mulf %0, %1 : f32
      %4 = arith.addf %2, %3 : f32
      memref.store %4, %s[%h, %j] : memref<4x32xf32>
    }
    scf.reduce
  }
  return
}
"""


def test_heads_that_share_no_operand_are_not_jammed() -> None:
    module = ir.Module.parse(HEADS, context=mlir.new_context())
    assert blocking.register_block(module, 8) == 1
    assert re.search(r"step \(%c1(_\d+)?, %c8(_\d+)?\)", str(module))  # columns only
