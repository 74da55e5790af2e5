"""Register tiles of vectors (pimbuild/codegen/vectile.py): which nests get them, what the
tile looks like, and that the compiled code computes the same values as numpy."""

from __future__ import annotations

import re
from pathlib import Path
from string import Template

import numpy as np
import pytest
from torch_mlir import ir

from pimbuild.codegen import blocking, jit, vectile
from pimbuild.frontend import mlir
from tests.test_codegen import LINEAR, XW, rows_attr

# y[f, p, q] = sum_{c,a,b} x[c, p s + a, q s + b] * w[f, c, a, b]: a convolution at stride
# ${S} as linalg lowers it (the input's address through an affine map).
CONV = """
#in = affine_map<(d0, d1) -> (d0 * ${S} + d1)>
func.func @mv(%x: memref<${C}x${H}x${H}xf32>, %w: memref<${F}x${C}x3x3xf32>,
              %y: memref<${F}x${P}x${P}xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %cC = arith.constant ${C} : index
  %cF = arith.constant ${F} : index
  %cP = arith.constant ${P} : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%f, %p, %q) = (%c0, %c0, %c0) to (%cF, %cP, %cP) step (%c1, %c1, %c1) {
    memref.store %zero, %y[%f, %p, %q] : memref<${F}x${P}x${P}xf32>
    scf.reduce
  }
  scf.parallel (%f, %p, %q) = (%c0, %c0, %c0) to (%cF, %cP, %cP) step (%c1, %c1, %c1) {
    scf.for %c = %c0 to %cC step %c1 {
      scf.for %a = %c0 to %c3 step %c1 {
        scf.for %b = %c0 to %c3 step %c1 {
          %pa = affine.apply #in(%p, %a)
          %qb = affine.apply #in(%q, %b)
          %0 = memref.load %x[%c, %pa, %qb] : memref<${C}x${H}x${H}xf32>
          %1 = memref.load %w[%f, %c, %a, %b] : memref<${F}x${C}x3x3xf32>
          %2 = memref.load %y[%f, %p, %q] : memref<${F}x${P}x${P}xf32>
          %3 = arith.mulf %0, %1 fastmath<reassoc,contract> : f32
          %4 = arith.addf %2, %3 fastmath<reassoc,contract> : f32
          memref.store %4, %y[%f, %p, %q] : memref<${F}x${P}x${P}xf32>
        }
      }
    }
    scf.reduce
  }
  return
}
"""


# A depthwise convolution as linalg lowers it: y[c, p, q] = sum_{a,b} x[c, p + a, q + b] *
# w[c, a, b], with the channels the innermost parallel dimension (strided in y and x).
DEPTHWISE = """
func.func @mv(%x: memref<${C}x${H}x${H}xf32>, %w: memref<${C}x3x3xf32>,
              %y: memref<${C}x${P}x${P}xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %cC = arith.constant ${C} : index
  %cP = arith.constant ${P} : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%c, %p, %q) = (%c0, %c0, %c0) to (%cC, %cP, %cP) step (%c1, %c1, %c1) {
    memref.store %zero, %y[%c, %p, %q] : memref<${C}x${P}x${P}xf32>
    scf.reduce
  }
  scf.parallel (%p, %q, %c) = (%c0, %c0, %c0) to (%cP, %cP, %cC) step (%c1, %c1, %c1) {
    scf.for %a = %c0 to %c3 step %c1 {
      scf.for %b = %c0 to %c3 step %c1 {
        %pa = arith.addi %p, %a : index
        %qb = arith.addi %q, %b : index
        %0 = memref.load %x[%c, %pa, %qb] : memref<${C}x${H}x${H}xf32>
        %1 = memref.load %w[%c, %a, %b] : memref<${C}x3x3xf32>
        %2 = memref.load %y[%c, %p, %q] : memref<${C}x${P}x${P}xf32>
        %3 = arith.mulf %0, %1 fastmath<reassoc,contract> : f32
        %4 = arith.addf %2, %3 fastmath<reassoc,contract> : f32
        memref.store %4, %y[%c, %p, %q] : memref<${C}x${P}x${P}xf32>
      }
    }
    scf.reduce
  }
  return
}
"""


def conv(s: int, f: int = 8, c: int = 3, p: int = 16) -> tuple[str, dict]:
    return CONV, {"S": s, "F": f, "C": c, "P": p, "H": s * (p - 1) + 3}


def parse(text: str, **dims: int) -> ir.Module:
    return ir.Module.parse(Template(text).substitute(dims), context=mlir.new_context())


def run(module: ir.Module, args: list[np.ndarray], out_shape: tuple,
        tmp_path: Path) -> tuple[int, np.ndarray]:
    done = jit.to_llvm(module, 8, stage="test", failure_dir=tmp_path / "failure")
    (y,) = jit.invoke(jit.engine_of(module), "mv", args,
                      [{"shape": list(out_shape), "dtype": "float32"}])
    return done["vector_tiled_nests"], y


def conv_reference(x: np.ndarray, w: np.ndarray, s: int, p: int) -> np.ndarray:
    want = np.zeros((w.shape[0], p, p), np.float32)
    span = s * (p - 1) + 1
    for a in range(3):
        for b in range(3):
            want += np.einsum("cpq,fc->fpq", x[:, a:a + span:s, b:b + span:s], w[:, :, a, b])
    return want


def test_convolution_gets_a_tile_of_output_channels_by_columns() -> None:
    """16 output columns (2 vectors of 8) by 4 output channels: 8 accumulators, loaded once
    before the reduction and stored once after it; each input vector serves the 4 channels
    (one vector.load per column vector per term), each filter value is broadcast."""
    text, dims = conv(1)
    module = parse(text, **dims)
    assert vectile.tile(module) == 1
    out = str(module)
    assert out.count("vector.load %arg2[") == 8 and out.count("vector.store") == 8
    body = out[out.index("iter_args"):out.index("vector.store")]
    assert body.count("vector.load %arg0[") == 2  # the input: one per vector, shared
    assert body.count("memref.load %arg1[") == 4  # the filter: one per channel
    assert body.count("vector.broadcast") == 4 and "memref.load %arg2" not in body
    assert rows_attr(module) == [8]  # the channels run innermost: every one shares x
    assert vectile.tile(module) == 0 and blocking.register_block(module, 8) == 0


def test_one_row_gets_more_vectors() -> None:
    """Without rows (one token's x @ W, a decode step's heads) the tile takes more vectors of
    columns instead, up to TILE: 8 sums in flight, not 2."""
    module = parse(XW, I=1, J=64, K=16)
    assert vectile.tile(module) == 1
    assert str(module).count("vector.store") == vectile.TILE == 8
    assert re.search(r"step \(%c1, %c64(_\d+)?\)", str(module))  # 8 vectors of 8 columns


@pytest.mark.parametrize(("s", "f", "p"), [(1, 8, 16), (2, 8, 16), (1, 2, 12), (2, 6, 8),
                                           (1, 16, 32), (1, 4, 28), (2, 4, 14), (2, 8, 7),
                                           (1, 2, 100)])
def test_tiled_convolution_computes_the_same_values(tmp_path: Path, s: int, f: int,
                                                    p: int) -> None:
    """Strides 1 and 2; 16, 8 and 32 columns; 12, 28, 14 and 7 (the last vector of a row
    masked) and 100 (vectors of 4); 8, 2, 6, 4 and 16 channels (tiles of 4, 2, 2 and 4 rows,
    or more with one vector)."""
    text, dims = conv(s, f=f, p=p)
    rng = np.random.default_rng(s * 100 + p)
    x = rng.standard_normal((3, dims["H"], dims["H"])).astype(np.float32)
    w = rng.standard_normal((f, 3, 3, 3)).astype(np.float32)
    tiled, y = run(parse(text, **dims), [x, w], (f, p, p), tmp_path)
    assert tiled == 1
    np.testing.assert_allclose(y, conv_reference(x, w, s, p), rtol=1e-5, atol=1e-5)


def test_a_row_that_does_not_divide_by_8_ends_in_a_masked_vector() -> None:
    """28 columns: 4 vectors of 8 per row, the last one loading and storing only its first
    4 lanes (at stride 2: the 7 elements they read), so nothing past the row is touched;
    with 4 vectors a row, 2 rows."""
    text, dims = conv(2, f=4, p=28)
    module = parse(text, **dims)
    assert vectile.tile(module) == 1
    out = str(module)
    assert out.count("vector.maskedstore") == 2 and out.count("vector.store") == 6
    assert "vector.constant_mask [7] : vector<15xi1>" in out  # the input, stride 2
    assert "vector.constant_mask [4] : vector<8xi1>" in out  # the sums
    # one block of all 28 columns (outermost now), the rows (channels) innermost by 2
    assert re.search(r"to \(%c28, %c28, %c4\) step \(%c28(_\d+)?, %c1, %c2(_\d+)?\)", out)


def test_stride_two_loads_only_the_lanes_span() -> None:
    """At stride 2 a vector of 8 columns reads 15 elements (no element past the last one the
    loop reads) and keeps every other one."""
    text, dims = conv(2)
    module = parse(text, **dims)
    assert vectile.tile(module) == 1
    out = str(module)
    assert "vector<15xf32>" in out
    assert "vector.shuffle" in out and "[0, 2, 4, 6, 8, 10, 12, 14]" in out


def test_depthwise_convolution_takes_its_columns_innermost(tmp_path: Path) -> None:
    """The channels ran innermost; the output columns (q) go there instead, and the rows are
    the output rows (p), which share the filter value broadcast (no vector is shared):
    4 rows x 2 vectors of 8 at 16 columns. x is small, so the rows then run innermost
    (pimbuild.rows: all 16). The same values."""
    module = parse(DEPTHWISE, C=4, P=16, H=18)
    assert vectile.tile(module) == 1
    assert re.search(r"to \(%c16, %c4, %c16\) step \(%c16(_\d+)?, %c1, %c4(_\d+)?\)",
                     str(module))
    assert str(module).count("vector.store") == 8 and rows_attr(module) == [16]
    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 18, 18)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3)).astype(np.float32)
    want = np.zeros((4, 16, 16), np.float32)
    for a in range(3):
        for b in range(3):
            want += x[:, a:a + 16, b:b + 16] * w[:, a, b][:, None, None]
    tiled, y = run(parse(DEPTHWISE, C=4, P=16, H=18), [x, w], (4, 16, 16), tmp_path)
    assert tiled == 1
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("i", "j", "k"), [(4, 32, 40), (3, 24, 7), (8, 12, 5), (1, 64, 16),
                                           (2, 6, 9), (4, 20, 3)])
def test_tiled_product_computes_the_same_values(tmp_path: Path, i: int, j: int,
                                                k: int) -> None:
    """x @ W with W stored (K, N): rows of x by vectors of W's row."""
    rng = np.random.default_rng(i * j + k)
    x, w = rng.standard_normal((i, k)).astype(np.float32), \
        rng.standard_normal((k, j)).astype(np.float32)
    tiled, y = run(parse(XW, I=i, J=j, K=k), [x, w], (i, j), tmp_path)
    assert tiled == 1
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)


def test_nests_it_cannot_tile_are_left_alone() -> None:
    """nn.Linear's layout (W[j, k]: the address moves with the column in an outer index),
    3 columns (too few for a vector), a stride of 3, a math op it does not vectorize,
    a column index used as a value, a call (whose copies could not be merged) and an
    accumulator whose outer index moves with the column."""
    assert vectile.tile(parse(LINEAR, I=4, J=64, K=32)) == 0
    assert vectile.tile(parse(XW, I=4, J=3, K=32)) == 0
    text, dims = conv(3)
    assert vectile.tile(parse(text, **dims)) == 0
    exp = XW.replace("%3 = arith.mulf %0, %1 fastmath<reassoc,contract> : f32",
                     "%m = arith.mulf %0, %1 : f32\n      %3 = math.exp %m : f32")
    assert vectile.tile(parse(exp, I=4, J=64, K=32)) == 0
    iota = XW.replace("%3 = arith.mulf %0, %1 fastmath<reassoc,contract> : f32",
                      "%n = arith.index_cast %j : index to i64\n"
                      "      %nf = arith.sitofp %n : i64 to f32\n"
                      "      %3 = arith.mulf %0, %nf : f32")
    assert vectile.tile(parse(iota, I=4, J=64, K=32)) == 0
    call = XW.replace("func.func @mv(", "func.func private @tick()\nfunc.func @mv(") \
        .replace("%3 = arith.mulf", "func.call @tick() : () -> ()\n      %3 = arith.mulf")
    assert vectile.tile(parse(call, I=4, J=64, K=32)) == 0
    diagonal = XW.replace("%y[%i, %j] : memref", "%y[%j, %j] : memref")
    assert vectile.tile(parse(diagonal, I=64, J=64, K=32)) == 0


def test_slope_of_index_arithmetic() -> None:
    """The stride along the column of the index expressions lowering writes, and None for
    one that is not affine in it."""
    module = parse("""
    #m = affine_map<(d0, d1)[s0] -> (d0 * 2 + d1 * 3 + s0)>
    #f = affine_map<(d0) -> (d0 floordiv 2)>
    func.func @mv(%j: index, %k: index) {
      %c2 = arith.constant 2 : index
      %0 = affine.apply #m(%j, %k)[%j]
      %1 = arith.muli %j, %c2 : index
      %2 = arith.addi %1, %k : index
      %3 = arith.subi %k, %j : index
      %4 = affine.apply #f(%j)
      %5 = arith.muli %j, %k : index
      return
    }""")
    func = next(iter(module.body.operations)).operation
    j = func.regions[0].blocks[0].arguments[0]
    ops = [op for op in mlir.walk(func) if op.name in ("affine.apply", "arith.muli",
                                                       "arith.addi", "arith.subi")]
    with module.context:
        assert [blocking.slope(op.results[0], j) for op in ops] == [3, 2, 2, -1, None, None]


def test_tiles_only_with_blocking_on(tmp_path: Path) -> None:
    """Register blocking 1 (a GPU build's host program) leaves the nests as lowered."""
    text, dims = conv(1)
    module = parse(text, **dims)
    done = jit.to_llvm(module, 1, stage="test", failure_dir=tmp_path)
    assert done["vector_tiled_nests"] == 0
    assert not re.search(r"llvm\.\w+ .*vector<", str(module))  # scalar code throughout
