"""What extract reports for each nest: iteration counts, buffers by allocation, sources."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pimbuild.codegen import loops
from tests.conftest import candidates


def test_streaming_nest_counts_and_bytes(run_build) -> None:
    (nest,) = candidates(run_build(["stages=[extract]", "model=ew_add", "model.size.n=4096"]))
    assert nest["n_iter"] == nest["n_total"] == 4096
    assert nest["parallel_dims"] == [4096]
    assert nest["source_op"] == "aten.add.Tensor"
    assert sorted(nest["reads"].values()) == [4096 * 4, 4096 * 4]
    assert list(nest["writes"].values()) == [4096 * 4]
    assert nest["moved_bytes"] == 3 * 4096 * 4
    assert nest["op_mix"] == {"loads": 2, "stores": 1, "arith": 1, "math": 0, "calls": 0}


def test_reduction_nest_parallel_vs_total_iterations(run_build) -> None:
    nests = candidates(run_build(["stages=[extract]", "model=softmax", "model.size.rows=8",
                                  "model.size.cols=32", "lowering.fusion=none"]))
    reductions = [c for c in nests if c["n_total"] > c["n_iter"]]
    assert len(reductions) == 2  # max and sum
    for nest in reductions:
        assert nest["n_iter"] == 8
        assert nest["n_total"] == 8 * 32
    exp = [c for c in nests if c["op_mix"]["math"] > 0]
    assert len(exp) == 1 and exp[0]["n_iter"] == 8 * 32


def test_buffer_read_and_written_in_place_is_counted_once(run_build) -> None:
    nests = candidates(run_build(["stages=[extract]", "model=softmax", "model.size.rows=8",
                                  "model.size.cols=32", "lowering.fusion=none"]))
    in_place = [c for c in nests if set(c["reads"]) & set(c["writes"])]
    assert in_place, "the accumulating reductions read and write their output buffer"
    for nest in in_place:
        union = {**nest["reads"], **nest["writes"]}
        assert nest["moved_bytes"] == sum(union.values())
        assert nest["moved_bytes"] < sum(nest["reads"].values()) + sum(nest["writes"].values())


def test_sources_name_module_and_operator(run_build) -> None:
    nests = candidates(run_build(["stages=[extract]", "model=mlp", "model.size.hidden=16",
                                  "model.size.ffn=32", "lowering.fusion=none"]))
    assert [c["source_module"] for c in nests] == ["up"] * 3 + [""] + ["down"] * 3
    assert nests[3]["source_op"] == "aten.relu.default"
    # A Linear is one torch operator that decomposes into a transpose and a matmul.
    assert {c["source_op"] for c in nests[:3]} == {"aten.linear.default"}
    assert {c["lowered_op"] for c in nests[:3]} == {"aten.permute.default", "aten.mm.default"}


def test_decomposed_operator_keeps_its_name(run_build) -> None:
    nests = candidates(run_build(["stages=[extract]", "model=layernorm", "model.size.tokens=4",
                                  "model.size.hidden=64", "lowering.fusion=none"]))
    assert len(nests) == 15
    assert {c["source_op"] for c in nests} == {"aten.layer_norm.default"}
    assert len({c["lowered_op"] for c in nests}) > 3  # mean, sub, mul, add, rsqrt...


SCF_IN_LOOP = """
func.func @forward(%arg0: memref<4x8xf32>, %arg1: memref<4x8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c2 = arith.constant 2 : index
  scf.for %t = %c0 to %c3 step %c1 {
    scf.parallel (%i, %j) = (%c0, %c0) to (%c4, %c8) step (%c1, %c2) {
      %v = memref.load %arg0[%i, %j] : memref<4x8xf32>
      %e = math.exp %v : f32
      memref.store %e, %arg1[%i, %j] : memref<4x8xf32>
      scf.reduce
    }
  }
  return
}
"""


def test_enclosing_trip_count_and_steps(tmp_path: Path) -> None:
    path = tmp_path / "scf.mlir"
    path.write_text(SCF_IN_LOOP)
    sig = {"function": "forward", "args": [{"name": "x", "source": "x"}], "outputs": [{}]}
    result = loops.extract(path, sig)
    (nest,) = result["candidates"]
    assert nest["enclosing_trips"] == 3
    assert nest["parallel_dims"] == [4, 4]  # 0..8 step 2
    assert nest["n_iter"] == 16
    assert nest["reads"] == {"arg0": 128} and nest["writes"] == {"arg1": 128}
    assert result["allocations"]["arg1"]["role"] == "output"
    assert nest["op_mix"]["math"] == 1


def test_a_bound_of_a_static_dim_counts_and_a_dynamic_one_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "scf.mlir"
    path.write_text(SCF_IN_LOOP.replace("to (%c4, %c8)", "to (%n, %c8)").replace(
        "%c2 = arith.constant 2 : index", "%c2 = arith.constant 2 : index\n"
        "  %n = memref.dim %arg0, %c0 : memref<4x8xf32>"))
    (nest,) = loops.extract(path, {"function": "forward", "args": [{"source": "x"}]})[
        "candidates"]  # the dim of a static shape is a constant
    assert nest["parallel_dims"] == [4, 4]  # j steps by 2
    path.write_text(path.read_text().replace("memref<4x8xf32>", "memref<?x8xf32>"))
    with pytest.raises(ValueError, match="loop bound is computed by memref.dim, which pimbuild "
                                         "cannot evaluate"):
        loops.extract(path, {"function": "forward", "args": [{"source": "x"}]})


def test_candidates_json_is_what_extract_returns(run_build) -> None:
    result = run_build(["stages=[extract]", "model=relu", "model.size.n=64"])
    data = json.loads((Path(result.manifest["stages"]["extract"]["dir"])
                       / "candidates.json").read_text())
    assert data["function"] == "forward"
    assert data["candidates"][0]["id"] == 0


def test_top_level_loop_with_iter_args(tmp_path: Path) -> None:
    """An ``scf.for`` carrying a value (a scan, a running sum) around a parallel nest."""
    path = tmp_path / "scf.mlir"
    path.write_text(SCF_IN_LOOP.replace(
        "  scf.for %t = %c0 to %c3 step %c1 {",
        "  %zero = arith.constant 0.0 : f32\n"
        "  %sum = scf.for %t = %c0 to %c3 step %c1 iter_args(%acc = %zero) -> (f32) {").replace(
        "      scf.reduce\n    }\n  }", "      scf.reduce\n    }\n"
        "    %next = arith.addf %acc, %zero : f32\n    scf.yield %next : f32\n  }"))
    sig = {"function": "forward", "args": [{"name": "x", "source": "x"}], "outputs": [{}]}
    (nest,) = loops.extract(path, sig)["candidates"]
    assert nest["enclosing_trips"] == 3 and nest["n_iter"] == 16


def test_read_extents_and_outer_invariant_reads(run_build) -> None:
    """What the footprint counter model reads: a buffer read only through a view made outside
    the nest counts the view's bytes; the buffers a GEMM's row loop does not address (its
    weight and bias) are the outer-invariant reads, the activations are not; they are the
    next loop's."""
    nests = candidates(run_build(["stages=[extract]", "model=relu",
                                  "model.recipe=tests.odd_recipes:rotate_half",
                                  "model.size={n:64}", "lowering.fusion=none"]))
    neg = next(c for c in nests if c["source_op"] == "aten.neg.default")
    ((x, whole),) = neg["reads"].items()
    assert whole == 4 * 64 * 4
    assert neg["read_extents"] == {x: whole // 2}
    ((key, half),) = neg["read_views"][x].items()  # the view, by what it addresses
    assert half == whole // 2 and key.split(":")[1] == "4x32"
    (mm, *_) = [c for c in candidates(run_build(["stages=[extract]", "model=mlp",
                                                  "model.size.batch=4"]))
                if c["n_total"] > c["n_iter"]]
    assert mm["parallel_dims"][0] == 4
    weight = max(mm["reads"], key=mm["reads"].get)
    assert weight in mm["outer_invariant_reads"]
    assert all(mm["reads"][b] < mm["reads"][weight] for b in mm["reads"]
               if b not in mm["outer_invariant_reads"])
    assert len(mm["outer_invariant_reads"]) < len(mm["reads"])
    # the next loop (the weight's rows) does not address the activations, which every
    # block of weight rows reads again when the rows run in one block
    x = next(b for b in mm["reads"] if b not in mm["outer_invariant_reads"]
             and b not in mm["writes"])
    assert x in mm["next_invariant_reads"] and weight not in mm["next_invariant_reads"]



def test_views_of_the_same_bytes_are_one_view(run_build) -> None:
    """Softmax reads its input through a 64x1x4096 view (the max) and a 64x4096 view (the
    exponentials): the same dense bytes, one key, so the footprint model finds the second
    read resident, as valgrind does (it counted 8,192x valgrind's misses there before)."""
    from pimbuild.targets.offload.counters.footprint import footprint_counts

    nests = candidates(run_build(["stages=[extract]", "model=softmax"]))
    x = "arg0"
    keys = [set(c["read_views"][x]) for c in nests if x in c.get("read_views", {})]
    assert len(keys) == 2 and keys[0] == keys[1] and len(keys[0]) == 1
    counts = footprint_counts(nests, 64 << 20, 64)
    first, second = (c["id"] for c in nests if x in c.get("read_views", {}))
    assert counts[first]["offcore_data_rd"] == 4 * 64 * 4096 // 64
    assert counts[second]["offcore_data_rd"] == 0

TRIANGULAR = """
module {
  func.func @forward(%a: memref<8x8xf32>, %out: memref<8x8xf32>) {
    %c0 = arith.constant 0 : index
    %c1 = arith.constant 1 : index
    %c4 = arith.constant 4 : index
    %c7 = arith.constant 7 : index
    %c8 = arith.constant 8 : index
    scf.for %i = %c0 to %c7 step %c1 {
      %rest = arith.subi %c7, %i : index
      scf.parallel (%r, %k) = (%c0, %c0) to (%rest, %c8) step (%c1, %c1) {
        %x = memref.load %a[%r, %k] : memref<8x8xf32>
        memref.store %x, %out[%r, %k] : memref<8x8xf32>
        scf.reduce
      }
      scf.parallel (%k) = (%c0) to (%c4) step (%c1) {
        %x = memref.load %a[%i, %k] : memref<8x8xf32>
        memref.store %x, %out[%i, %k] : memref<8x8xf32>
        scf.reduce
      }
    }
    scf.parallel (%r) = (%c0) to (%c8) step (%c1) {
      scf.for %j = %c0 to %r step %c1 {
        %x = memref.load %a[%r, %j] : memref<8x8xf32>
        %y = arith.addf %x, %x : f32
        memref.store %y, %out[%r, %j] : memref<8x8xf32>
      }
      scf.reduce
    }
    return
  }
}
"""
SIGNATURE = {"function": "forward",
             "args": [{"name": "a", "source": "a", "kind": "input"}]}


def test_triangular_nests_count_exactly(tmp_path: Path) -> None:
    """A nest whose bound is an enclosing loop's ``7 - i``, and one whose inner loop runs
    ``j < r`` of its own parallel variable: each invocation's counts, exact sums, their
    means; a nest of constant bounds inside the loop keeps its counts and gets a scope."""
    (tmp_path / "scf.mlir").write_text(TRIANGULAR)
    nests = loops.extract(tmp_path / "scf.mlir", SIGNATURE)["candidates"]
    outer, row, lower = nests
    assert outer["per_invocation"] == [[(7 - i) * 8, (7 - i) * 8] for i in range(7)]
    assert outer["enclosing_trips"] == 7 and outer["parallel_dims"] == [7, 8]
    assert outer["n_iter"] == outer["n_total"] == sum((7 - i) * 8 for i in range(7)) // 7
    assert outer["scope"] == row["scope"] == "scf.for#0"
    assert "per_invocation" not in row and row["n_iter"] == 4 and row["enclosing_trips"] == 7
    # an iteration whose inner loop runs no times counts once, as with constant bounds
    assert lower["per_invocation"] == [[8, sum(max(r, 1) for r in range(8))]]
    assert "scope" not in lower and lower["n_iter"] == 8 and lower["n_total"] == 29
    # one parallel iteration's mix: 28 loads and adds over 8 rows
    assert lower["op_mix"]["loads"] == lower["op_mix"]["arith"] == 28 / 8


def test_a_walk_that_stops_at_a_varying_loop_counts_nothing_twice(tmp_path: Path) -> None:
    """A constant inner loop before one of ``j < r``: the first walk of the body counts the
    constant loop and then stops; the counts start again, so each op counts once."""
    before = (
        "      scf.for %q = %c0 to %c4 step %c1 {\n"
        "        %z = memref.load %a[%r, %q] : memref<8x8xf32>\n"
        "        memref.store %z, %out[%r, %q] : memref<8x8xf32>\n"
        "      }\n")
    text = TRIANGULAR.replace("      scf.for %j = %c0 to %r step %c1 {",
                              before + "      scf.for %j = %c0 to %r step %c1 {")
    (tmp_path / "scf.mlir").write_text(text)
    lower = loops.extract(tmp_path / "scf.mlir", SIGNATURE)["candidates"][2]
    # per row r: 4 + r innermost runs; loads 4 + r, stores 4 + r, adds r
    assert lower["per_invocation"] == [[8, sum(4 + r for r in range(8))]]
    assert lower["op_mix"]["loads"] == lower["op_mix"]["stores"] == (32 + 28) / 8
    assert lower["op_mix"]["arith"] == 28 / 8


def test_a_bound_loaded_from_memory_is_one_line(tmp_path: Path) -> None:
    text = TRIANGULAR.replace("%rest = arith.subi %c7, %i : index",
                              "%rest = memref.load %n[] : memref<index>").replace(
        "%out: memref<8x8xf32>)", "%out: memref<8x8xf32>, %n: memref<index>)")
    (tmp_path / "scf.mlir").write_text(text)
    with pytest.raises(ValueError, match="loop bound is computed by memref.load, which "
                                         "pimbuild cannot evaluate"):
        loops.extract(tmp_path / "scf.mlir", SIGNATURE)
