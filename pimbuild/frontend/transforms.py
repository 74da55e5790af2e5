"""IR transforms of pimbuild's own, on linalg-on-tensors, written with the MLIR Python bindings.

- ``add_fastmath``: ``#arith.fastmath<reassoc,contract>`` on float arithmetic, so LLVM may
  reassociate and vectorize reductions (the naive loops are otherwise ~80x slower than eager).
- ``controlled_fusion``: named ops are generalized, then MLIR's elementwise fusion runs,
  except that no elementwise producer that computes anything is fused into a reduction; pure
  data movement (a transpose or broadcast whose body only yields an input) is, so a matmul
  reads a transposed weight in place instead of after a copy nest. MLIR's pass fuses a
  producer only when it has a single use, so each protected producer gets a temporary second
  use (an unregistered, side-effecting ``pimbuild.keep`` op) for the duration of the pass.
  The same keeps a reduction's result from being folded into a reshape that gives it a
  narrow innermost dimension (``_protect_reduction_results``).
- ``distinct_results``: a value returned twice is returned once and then as a copy.
- ``truncate_through_f32``: an f64 -> bf16 truncation becomes f64 -> f32 -> bf16.
- ``drop_asserts``: torch-mlir's run-time ``cf.assert`` checks are removed.
"""

from __future__ import annotations

from torch_mlir import ir
from torch_mlir.passmanager import PassManager

from pimbuild.frontend.mlir import ELEMENTWISE_FUSION, GENERALIZE, walk

FASTMATH_OPS = frozenset({
    "arith.addf", "arith.subf", "arith.mulf", "arith.divf", "arith.remf", "arith.negf",
    "arith.maximumf", "arith.minimumf", "arith.maxnumf", "arith.minnumf",
})
KEEP_OP = "pimbuild.keep"


def add_fastmath(module: ir.Module, flags: str = "reassoc,contract") -> int:
    """Set ``fastmath`` on every float arithmetic op; returns how many ops it marked."""
    attr = ir.Attribute.parse(f"#arith.fastmath<{flags}>", module.context)
    marked = 0
    for op in walk(module.operation):
        if op.name in FASTMATH_OPS:
            op.attributes["fastmath"] = attr
            marked += 1
    return marked


def _iterators(op: ir.Operation) -> list[str]:
    return [str(a).strip('"').split("<")[-1].rstrip(">") for a in op.attributes["iterator_types"]]


def _is_elementwise_generic(op: ir.Operation) -> bool:
    return op.name == "linalg.generic" and all(i == "parallel" for i in _iterators(op))


def _is_reduction(op: ir.Operation) -> bool:
    return op.name == "linalg.generic" and "reduction" in _iterators(op)


def _moves_data_only(op: ir.Operation) -> bool:
    """A generic whose body only yields (some of) its block arguments: copy, transpose,
    broadcast. Fusing it into a consumer changes an indexing map, not the arithmetic."""
    body = op.regions[0].blocks[0]
    ops = [o.operation for o in body.operations]
    return len(ops) == 1 and all(isinstance(v.owner, ir.Block) for v in ops[0].operands)


RESHAPES = frozenset({"tensor.expand_shape", "tensor.collapse_shape", "tensor.cast"})


def _producer(value: ir.Value) -> tuple[ir.Value, ir.Operation | None]:
    """The op that computes ``value``, looking through reshapes (the fusion pass propagates
    reshapes, so a producer behind one would still be fused)."""
    while not isinstance(value.owner, ir.Block):
        op = value.owner.operation
        if op.name not in RESHAPES:
            return value, op
        value = op.operands[0]
    return value, None


def _protect_reduction_inputs(module: ir.Module) -> int:
    kept = 0
    for op in list(walk(module.operation)):
        if not _is_reduction(op):
            continue
        for operand in op.operands:
            value, producer = _producer(operand)
            if (producer is not None and _is_elementwise_generic(producer)
                    and not _moves_data_only(producer)):
                with ir.InsertionPoint(op), op.location:
                    ir.Operation.create(KEEP_OP, operands=[value])
                kept += 1
    return kept


def _protect_reduction_results(module: ir.Module) -> int:
    """Keep MLIR's fusion from folding an ``expand_shape`` of a reduction's result whose new
    innermost dimension is shorter than ``NARROW`` into the reduction itself. The fold
    expands the reduction's iteration space, so a matmul whose result is viewed as pairs
    (``view(..., -1, 2)``, then ``view_as_complex``: Meta's rotary embedding) became a 6-D
    contraction whose innermost parallel loop has 2 iterations, which the register blocking
    cannot vectorise: 3.2x the time of the same projection without the view (Meta's
    attention at LLaMA-7B width, 128 tokens, AMD EPYC VM). The reshape stays a view of the
    result instead."""
    kept = 0
    for op in list(walk(module.operation)):
        if not _is_reduction(op):
            continue
        for result in op.results:
            for use in result.uses:
                user = use.owner
                if user.name == "tensor.expand_shape":
                    shape = ir.RankedTensorType(user.results[0].type).shape
                    if shape and 1 < shape[-1] < NARROW:  # a unit dimension costs nothing
                        with ir.InsertionPoint.after(op), op.location:
                            ir.Operation.create(KEEP_OP, operands=[result])
                        kept += 1
                        break
    return kept


NARROW = 16  # floats in one 512-bit vector register


def controlled_fusion(module: ir.Module) -> None:
    """Fuse elementwise producers into elementwise consumers, and data movement into
    anything (see module docstring)."""
    with module.context:
        PassManager.parse(GENERALIZE).run(module.operation)
    _protect_reduction_inputs(module)
    _protect_reduction_results(module)
    with module.context:
        PassManager.parse(ELEMENTWISE_FUSION).run(module.operation)
    for op in list(walk(module.operation)):
        if op.name == KEEP_OP:
            op.erase()


def no_fusion(module: ir.Module) -> None:
    """``lowering.fusion=none``: every linalg op lowers to its own loop nest."""


def full_fusion(module: ir.Module) -> None:
    with module.context:
        PassManager.parse(ELEMENTWISE_FUSION).run(module.operation)


def distinct_results(module: ir.Module) -> int:
    """Return a copy where a function returns one value a second time: two outputs the
    forward computes alike (``(a * 2, a * 2)``) are one value after MLIR's CSE, and
    bufferization (``buffer-results-to-out-params``) crashed on a value returned twice
    (SIGSEGV). Returns how many copies it made."""
    copies = 0
    for op in list(walk(module.operation)):
        if op.name != "func.return":
            continue
        seen: list[ir.Value] = []
        for i, value in enumerate(list(op.operands)):
            if any(value == earlier for earlier in seen):
                with ir.InsertionPoint(op), op.location:
                    copy = ir.Operation.create(
                        "bufferization.alloc_tensor", results=[value.type], operands=[value],
                        attributes={"operandSegmentSizes": ir.DenseI32ArrayAttr.get([0, 1, 0])})
                op.operands[i] = copy.results[0]
                copies += 1
            seen.append(value)
    return copies


def truncate_through_f32(module: ir.Module) -> int:
    """Rewrite every ``arith.truncf`` from f64 to bf16 as f64 -> f32 -> bf16; returns how many.
    PyTorch converts so (``c10::BFloat16`` is built from a float), and LLVM's direct
    conversion calls compiler-rt's ``__truncdfbf2``, which libgcc 12 lacks."""
    count = 0
    with module.context:
        f32 = ir.F32Type.get()
        for op in list(walk(module.operation)):
            if (op.name == "arith.truncf" and str(op.operands[0].type) == "f64"
                    and str(op.results[0].type) == "bf16"):
                with ir.InsertionPoint(op), op.location:
                    narrowed = ir.Operation.create("arith.truncf", results=[f32],
                                                   operands=[op.operands[0]])
                op.operands[0] = narrowed.result
                count += 1
    return count


def drop_asserts(module: ir.Module) -> dict[str, int]:
    """Remove every ``cf.assert``; returns their messages with counts. A failed one aborts
    the whole process (no error a user can read), and some are stricter than PyTorch:
    ``reciprocal`` asserts that no element is zero where eager returns inf. The lowered
    program only ever runs on the inputs eager already ran, and its results are checked
    against eager's, so the checks guard nothing eager has not."""
    dropped: dict[str, int] = {}
    for op in list(walk(module.operation)):
        if op.name == "cf.assert":
            message = ir.StringAttr(op.attributes["msg"]).value
            dropped[message] = dropped.get(message, 0) + 1
            op.erase()
    return dropped
