"""Packed panels of the operand a vector tile's rows share (pimbuild.codegen.panels)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pimbuild.codegen import blocking, jit, panels, vectile
from pimbuild.frontend import mlir
from pimbuild.targets.pim import instrument
from tests.test_codegen import LINEAR, XW, parse, rows_attr

# x @ W for a batch: W[b, k, j] read at the batch the outer parallel dimension runs, as
# attention's probabilities x V lower.
BATCHED = """
func.func @mv(%x: memref<2x${I}x${K}xf32>, %W: memref<2x${K}x${J}xf32>,
              %y: memref<2x${I}x${J}xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %cI = arith.constant ${I} : index
  %cJ = arith.constant ${J} : index
  %cK = arith.constant ${K} : index
  %zero = arith.constant 0.0 : f32
  scf.parallel (%b, %i, %j) = (%c0, %c0, %c0) to (%c2, %cI, %cJ) step (%c1, %c1, %c1) {
    memref.store %zero, %y[%b, %i, %j] : memref<2x${I}x${J}xf32>
    scf.reduce
  }
  scf.parallel (%b, %i, %j) = (%c0, %c0, %c0) to (%c2, %cI, %cJ) step (%c1, %c1, %c1) {
    scf.for %k = %c0 to %cK step %c1 {
      %0 = memref.load %x[%b, %i, %k] : memref<2x${I}x${K}xf32>
      %1 = memref.load %W[%b, %k, %j] : memref<2x${K}x${J}xf32>
      %2 = memref.load %y[%b, %i, %j] : memref<2x${I}x${J}xf32>
      %3 = arith.mulf %0, %1 fastmath<reassoc,contract> : f32
      %4 = arith.addf %2, %3 fastmath<reassoc,contract> : f32
      memref.store %4, %y[%b, %i, %j] : memref<2x${I}x${J}xf32>
    }
    scf.reduce
  }
  return
}
"""


def compiled(module, args: list[np.ndarray], shape: tuple, tmp_path: Path):
    done = jit.to_llvm(module, 8, stage="test", failure_dir=tmp_path / "failure")
    (y,) = jit.invoke(jit.engine_of(module), "mv", args,
                      [{"shape": list(shape), "dtype": "float32"}])
    return done, y


@pytest.mark.parametrize(("i", "j", "k"), [(64, 32, 40), (32, 48, 7), (36, 64, 5)])
def test_packed_product_computes_the_same_values(tmp_path: Path, i: int, j: int,
                                                 k: int) -> None:
    rng = np.random.default_rng(i + j + k)
    x, w = rng.standard_normal((i, k)).astype(np.float32), \
        rng.standard_normal((k, j)).astype(np.float32)
    done, y = compiled(parse(XW, I=i, J=j, K=k), [x, w], (i, j), tmp_path)
    assert (done["vector_tiled_nests"], done["packed_nests"]) == (1, 1)
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)


def test_batched_product_packs_each_batch(tmp_path: Path) -> None:
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((2, 32, 24)).astype(np.float32), \
        rng.standard_normal((2, 24, 32)).astype(np.float32)
    done, y = compiled(parse(BATCHED, I=32, K=24, J=32), [x, w], (2, 32, 32), tmp_path)
    assert done["packed_nests"] == 1
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)


def test_rows_read_w_from_the_panel() -> None:
    """W's two vectors per term are copied once per block of 16 columns into a K x 16 panel
    before the blocks of rows; the tile then loads them from it, in order."""
    module = parse(XW, I=64, J=32, K=16)
    assert vectile.tile(module) == 1
    text = str(module)
    assert text.count("memref.alloc() : memref<16x16xf32>") == 1
    copy, tile = text[:text.index("iter_args")], text[text.index("iter_args"):]
    assert copy.count("vector.load %arg1[") == 2 and copy.count("vector.store") == 2
    assert "%arg1[" not in tile and tile.count("vector.load %alloc[") == 2
    assert rows_attr(module) == [64] and panels.packed(module) == 1


def test_left_alone_where_a_panel_gains_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def packed(**dims: int) -> int:
        module = parse(XW, **dims)
        assert vectile.tile(module) == 1
        return panels.packed(module)

    assert packed(I=64, J=32, K=16) == 1
    assert packed(I=28, J=32, K=16) == 0  # 7 blocks of 4 rows share it: fewer than 8
    assert packed(I=64, J=16, K=16) == 0  # W's rows are the panel's: contiguous already
    assert packed(I=64, J=28, K=16) == 0  # a masked vector ends each row
    monkeypatch.setattr(panels, "PANEL_BYTES", 16 * 16 * 4 - 4)
    assert packed(I=64, J=32, K=16) == 0  # past the size the panels may take


def test_profile_still_finds_the_rows_of_a_packed_nest() -> None:
    """The panel sits between the nest's marker and the nest: ``nest_marks`` looks past
    it, as footprint needs the rows to charge W once."""
    module = parse(XW, I=64, J=32, K=16)
    instrument.insert_markers(module, "mv", 2)
    _, rows, columns = instrument.generate(module, 8, "test", Path("/nonexistent"))
    assert rows == {1: 64} and columns == {1: 16}


def test_rows_run_innermost_past_the_row_operand_bound_where_panels_pack(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """x past ``blocking.ROW_OPERAND_BYTES``: with panels the rows still run innermost (each
    block of columns reads x once; pimbuild.rows: all 64), without them in blocks of 4."""
    monkeypatch.setattr(blocking, "ROW_OPERAND_BYTES", 1024)
    module = parse(XW, I=64, J=32, K=16)
    assert vectile.tile(module) == 1 and panels.packed(module) == 1
    assert rows_attr(module) == [64]
    monkeypatch.setattr(vectile, "PACK", False)
    module = parse(XW, I=64, J=32, K=16)
    assert vectile.tile(module) == 1 and panels.packed(module) == 0
    assert rows_attr(module) == [4]
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((64, 16)).astype(np.float32), \
        rng.standard_normal((16, 32)).astype(np.float32)
    monkeypatch.setattr(vectile, "PACK", True)
    done, y = compiled(parse(XW, I=64, J=32, K=16), [x, w], (64, 32), tmp_path)
    assert done["packed_nests"] == 1
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)


def test_profile_reads_the_panels_columns(tmp_path: Path) -> None:
    """codegen.json's panel_columns reach the footprint backend as column_block."""
    import json

    from pimbuild.targets.pim import program

    (tmp_path / "codegen.json").write_text(json.dumps(
        {"rows": {"1": 64}, "panel_columns": {"1": 16}}))
    (tmp_path / "candidates.json").write_text(json.dumps(
        {"candidates": [{"id": 0}, {"id": 1}]}))
    nests = program.nest_candidates(tmp_path, tmp_path)
    assert nests == [{"id": 0, "row_block": 1},
                     {"id": 1, "row_block": 64, "column_block": 16}]


def test_a_nest_inside_a_loop_gets_no_panel() -> None:
    """Its panel would be allocated once an iteration of the loop around it."""
    second = XW.index("scf.parallel", XW.index("scf.parallel") + 1)
    end = XW.index("  return")
    looped = XW[:second] + "scf.for %t = %c0 to %c1 step %c1 {\n" + XW[second:end] \
        + "  }\n" + XW[end:]
    module = parse(looped, I=64, J=32, K=16)
    assert vectile.tile(module) == 1 and panels.packed(module) == 0
    assert "memref.alloc(" not in str(module)


@pytest.mark.parametrize(("i", "j", "k"), [(96, 32, 16), (128, 48, 40), (200, 64, 7)])
def test_linear_weight_is_tiled_from_a_transposed_panel(tmp_path: Path, i: int, j: int,
                                                        k: int) -> None:
    """nn.Linear's W[j, k] (stored N x K): no vector of W exists along the columns, so the
    tile reads them from a panel copied element by element; every stand-in is replaced and
    the product is x @ W.T."""
    module = parse(LINEAR, I=i, J=j, K=k)
    assert vectile.tile(module) == 1 and panels.packed(module) == 1
    text = str(module)
    assert panels.TRANSPOSED_ATTR not in text
    tile = text[text.index("iter_args"):]
    assert "%arg1[" not in tile and "vector.load %alloc[" in tile
    rng = np.random.default_rng(i + j + k)
    x, w = rng.standard_normal((i, k)).astype(np.float32), \
        rng.standard_normal((j, k)).astype(np.float32)
    done, y = compiled(parse(LINEAR, I=i, J=j, K=k), [x, w], (i, j), tmp_path)
    assert (done["vector_tiled_nests"], done["packed_nests"]) == (1, 1)
    np.testing.assert_allclose(y, x @ w.T, rtol=1e-5, atol=1e-5)


def test_linear_weight_with_few_rows_stays_with_register_blocking(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Below TRANSPOSED_ROW_BLOCKS blocks of rows (64 rows: 16), or without panels, or with
    columns that need a masked vector or vectors of 4, vectile leaves nn.Linear's nest to
    codegen."""
    for dims in ({"I": 64, "J": 32, "K": 16}, {"I": 96, "J": 20, "K": 16},
                 {"I": 1, "J": 64, "K": 32},
                 {"I": 96, "J": 68, "K": 16}):  # vectors of 4 (68 columns): slower so
        assert vectile.tile(parse(LINEAR, **dims)) == 0
    monkeypatch.setattr(vectile, "PACK", False)
    assert vectile.tile(parse(LINEAR, I=96, J=32, K=16)) == 0
    monkeypatch.setattr(vectile, "PACK", True)
    monkeypatch.setattr(panels, "PANEL_BYTES", 16 * 16 * 4 - 4)
    assert vectile.tile(parse(LINEAR, I=96, J=32, K=16)) == 0


def test_the_panel_is_freed_after_its_nest() -> None:
    """The deallocation pipeline frees each nest's panel (a model may have hundreds)."""
    from pimbuild.frontend import mlir

    module = parse(XW, I=64, J=32, K=16)
    vectile.tile(module)
    mlir.run_pipeline(module, "builtin.module(func.func(buffer-deallocation-pipeline))",
                      stage="test", failure_dir=Path("/nonexistent"))
    assert "memref.dealloc %alloc : memref<16x16xf32>" in str(module)


def test_linear_weight_read_at_a_shifted_row_is_left_to_register_blocking(
        tmp_path: Path) -> None:
    """W[j + 1, k]: the tile's second vector would read W[(j + 8) + 1, k], an address the
    panel's copy does not recognize, so vectile leaves the nest (before this, it tiled it
    and stopped with an internal error)."""
    text = LINEAR.replace("%W: memref<${J}x${K}xf32>", "%W: memref<${J1}x${K}xf32>").replace(
        "%1 = memref.load %W[%j, %k] : memref<${J}x${K}xf32>",
        "%jj = arith.addi %j, %c1 : index\n"
        "      %1 = memref.load %W[%jj, %k] : memref<${J1}x${K}xf32>")
    assert vectile.tile(parse(text, I=96, J=32, J1=33, K=16)) == 0
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((96, 16)).astype(np.float32), \
        rng.standard_normal((33, 16)).astype(np.float32)
    _, y = compiled(parse(text, I=96, J=32, J1=33, K=16), [x, w], (96, 32), tmp_path)
    np.testing.assert_allclose(y, x @ w[1:].T, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("rows", "cols", "twelve", "accumulators", "width"),
                         [(96, 32, True, 12, 16), (96, 32, False, 8, 16), (64, 32, True, 8, 16),
                          (64, 48, True, 12, 24), (64, 48, False, 8, 16)])
def test_packed_tiles_take_twelve_accumulators_where_rows_and_columns_divide(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, rows: int, cols: int, twelve: bool,
        accumulators: int, width: int) -> None:
    """Where panels pack (``vectile.SIX_ROWS``), 6 rows x 2 vectors (12 accumulators) where
    the rows divide by 6, else 4 x 3 where the rows divide by 4 and the columns by 24
    (``vectile.TWELVE``); else 4 x 2. The same values either way."""
    monkeypatch.setattr(vectile, "SIX_ROWS", twelve)
    module = parse(XW, I=rows, J=cols, K=16)
    assert vectile.tile(module) == 1 and panels.packed(module) == 1
    tile = str(module)[str(module).index("iter_args"):]
    assert tile.count("vector.store") == accumulators  # each accumulator's, after the sums
    assert f"{panels.COLUMNS_ATTR} = {width} : i64" in str(module)
    rng = np.random.default_rng(rows)
    x, w = rng.standard_normal((rows, 16)).astype(np.float32), \
        rng.standard_normal((16, cols)).astype(np.float32)
    _, y = compiled(parse(XW, I=rows, J=cols, K=16), [x, w], (rows, cols), tmp_path)
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("x_bound", "panel_bound", "blocks"),
                         [(96 * 16 * 4, 1 << 20, 1), (96 * 16 * 4 - 4, 1 << 20, 2),
                          (96 * 16 * 4 // 5, 1 << 20, 8), (96 * 16 * 4 // 5, 16 * 16 * 4 - 4, 1)])
def test_rows_run_in_blocks_where_x_is_past_the_bound_and_the_panel_small(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, x_bound: int, panel_bound: int,
        blocks: int) -> None:
    """x past ``panels.ROW_BLOCK_BYTES`` (here 96 rows of 16 floats against the bound): the
    rows run in the fewest blocks of whole tiles (a divisor of their 16) that hold at most
    that each (a fifth of x: 8 blocks), outside the blocks of columns, where the panels fit
    ``ROW_BLOCK_PANEL_BYTES``; each block reads each panel once (the rows marked for
    footprint). The same values either way."""
    monkeypatch.setattr(panels, "ROW_BLOCK_BYTES", x_bound)
    monkeypatch.setattr(panels, "ROW_BLOCK_PANEL_BYTES", panel_bound)
    module = parse(XW, I=96, J=32, K=16)  # 16 tiles of 6 rows, 2 blocks of 16 columns
    assert vectile.tile(module) == 1 and panels.packed(module) == 1
    nest = next(op for op in mlir.walk(module.operation) if panels.PANELS_ATTR in op.attributes)
    assert panels.row_blocks(nest) == blocks and rows_attr(module) == [96 // blocks]
    upper = [blocking.constant(v) for v in list(nest.operands)[2:4]]
    assert upper == ([blocks, 32] if blocks > 1 else [32, 1])  # row blocks outside columns
    rng = np.random.default_rng(blocks)
    x, w = rng.standard_normal((96, 16)).astype(np.float32), \
        rng.standard_normal((16, 32)).astype(np.float32)
    _, y = compiled(module, [x, w], (96, 32), tmp_path)
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("x_bound", "blocks"), [(96 * 16 * 4, 1), (96 * 16 * 4 - 4, 2)])
def test_a_batch_blocks_the_rows_of_its_own_x(monkeypatch: pytest.MonkeyPatch,
                                              tmp_path: Path, x_bound: int,
                                              blocks: int) -> None:
    """x[b, i, k] of 2 batches: each batch's 96 x 16 is what must fit the bound, not all
    of x (attention's probabilities x V read a head at a time)."""
    monkeypatch.setattr(panels, "ROW_BLOCK_BYTES", x_bound)
    module = parse(BATCHED, I=96, K=16, J=32)
    assert vectile.tile(module) == 1 and panels.packed(module) == 1
    nest = next(op for op in mlir.walk(module.operation) if panels.PANELS_ATTR in op.attributes)
    assert panels.row_blocks(nest) == blocks
    rng = np.random.default_rng(blocks)
    x, w = rng.standard_normal((2, 96, 16)).astype(np.float32), \
        rng.standard_normal((2, 16, 32)).astype(np.float32)
    _, y = compiled(module, [x, w], (2, 96, 32), tmp_path)
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)
