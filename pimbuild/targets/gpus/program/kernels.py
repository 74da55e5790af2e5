"""Kernels of a linalg-on-tensors program: what a GPU lowering launches (docs/design.md §10).

One kernel per linalg op after fusion (named ops are generalized first), per tensor copy
(``tensor.concat``, ``insert_slice``, ``pad``) and per TMTensor op. Views (``expand_shape``,
``collapse_shape``, ``extract_slice``, ``cast``) launch nothing: they name their source's
buffer, except a view the function returns, which is copied into a buffer of its own, as a
constant the function returns is (a constant read by kernels is cloned into each). A
linalg op with no inputs that only initializes the accumulators of the kernels reading it (a
reduction's or a GEMM's zero fill) is merged into each of them, as cuBLAS's ``beta = 0`` and
a fused reduction's init do.

Each kernel records its FLOPs (iterations x floating-point ops of the body), the buffers it
reads and writes with their bytes at the IR's element type, its class (``contraction``: a
reduction whose body multiplies two inputs and accumulates, the tensor-core candidates;
``reduction``, ``elementwise``, ``copy``) and its source torch operator. Buffers are named
``arg<i>`` (function arguments), ``const<i>`` (tensor constants) and ``k<id>.<n>`` (the
``n``-th result of kernel ``id``); the function's results are listed in ``outputs``.
"""

from __future__ import annotations

import math
from typing import Any

from torch_mlir import ir

from pimbuild.codegen.loops import ELEMENT_BYTES, source_of
from pimbuild.frontend import mlir

VIEWS = ("tensor.expand_shape", "tensor.collapse_shape", "tensor.extract_slice", "tensor.cast",
         "tensor.reshape")
COPIES = ("tensor.concat", "tensor.insert_slice", "tensor.pad")
IGNORED = ("tensor.empty", "func.return")
# Body ops counted as one floating-point operation each (math.* included: a transcendental
# is one op here; the roofline's CUDA-core efficiency absorbs its higher cost).
FREE = ("linalg.yield", "linalg.index", "arith.constant", "arith.index_cast", "arith.truncf",
        "arith.extf", "arith.sitofp", "arith.fptosi", "arith.bitcast")


def tensor_bytes(t: ir.Type) -> int:
    return math.prod(t.shape) * ELEMENT_BYTES.get(str(t.element_type), 4)


def is_float(t: ir.Type) -> bool:
    return str(t.element_type).startswith(("f", "bf"))


def _iterations(op: ir.Operation) -> int:
    """The iteration-domain size of a linalg.generic, from its operands' shapes and maps."""
    maps = [a.value for a in op.attributes["indexing_maps"]]
    ranges = [1] * len(op.attributes["iterator_types"])
    for operand, amap in zip(op.operands, maps, strict=True):
        shape = operand.type.shape if isinstance(operand.type, ir.ShapedType) else []
        for size, expr in zip(shape, amap.results, strict=False):
            if isinstance(expr, ir.AffineDimExpr):
                ranges[expr.position] = size
    return math.prod(ranges)


def _body(op: ir.Operation) -> tuple[int, bool]:
    """(floating-point ops per iteration, multiply-accumulate into the output)."""
    block = op.regions[0].blocks[0]
    ops = [o.operation for o in block.operations]
    flops = sum(1 for o in ops if o.name not in FREE and o.name.startswith(("arith.", "math.")))
    n_in = len(op.operands) - len(op.results)
    out_args = {block.arguments[i] for i in range(n_in, len(block.arguments))}
    mac = False
    for o in ops:
        if o.name in ("arith.addf", "arith.addi") and any(v in out_args for v in o.operands):
            other = [v for v in o.operands if v not in out_args]
            mac = mac or any(not isinstance(v.owner, ir.Block) and
                             v.owner.operation.name in ("arith.mulf", "arith.muli")
                             for v in other)
    return flops, mac


def _classify(op: ir.Operation, mac: bool) -> str:
    reduces = any("reduction" in str(a) for a in op.attributes["iterator_types"])
    n_in = len(op.operands) - len(op.results)
    if reduces and mac and n_in >= 2:
        return "contraction"
    return "reduction" if reduces else "elementwise"


class Buffers:
    """SSA tensor values -> buffer names; views share their source's buffer. (IR values hash
    and compare by the value they wrap, so they are the keys.)"""

    def __init__(self) -> None:
        self.names: dict[Any, str] = {}
        self.bytes: dict[str, int] = {}
        self.floating: dict[str, bool] = {}

    def name(self, value: ir.Value, name: str) -> None:
        self.names[value] = name
        self.bytes[name] = tensor_bytes(value.type)
        self.floating[name] = is_float(value.type)

    def alias(self, value: ir.Value, source: ir.Value) -> None:
        self.names[value] = self.of(source)

    def of(self, value: ir.Value) -> str | None:
        return self.names.get(value)


def _kernel(op: ir.Operation, ident: int, buffers: Buffers, kind: str, flops: int,
            iterations: int) -> dict[str, Any]:
    reads = {}
    for v in mlir.free_values(op):  # ins, outs (an accumulator may be read), captures
        name = buffers.of(v) if isinstance(v.type, ir.RankedTensorType) else None
        if name is not None and not name.startswith("init"):
            reads[name] = buffers.bytes[name]
    writes = {}
    for i, r in enumerate(op.results):
        if isinstance(r.type, ir.RankedTensorType):
            buffers.name(r, f"k{ident}.{i}")
            writes[f"k{ident}.{i}"] = buffers.bytes[f"k{ident}.{i}"]
    return {"id": ident, **source_of(op), "op": op.name, "kind": kind, "flops": flops,
            "iterations": iterations, "reads": reads, "writes": writes}


def _is_init_fill(op: ir.Operation) -> bool:
    """A linalg op with no inputs (it writes constants): a fill."""
    return op.name == "linalg.generic" and len(op.operands) == len(op.results)


def _only_outs_uses(value: ir.Value) -> bool:
    """Every use of ``value`` (through views) is the ``outs`` operand of a linalg op: the fill
    is each reader's initialization (CSE may have shared one fill between several GEMMs)."""
    uses = list(value.uses)
    for use in uses:
        user = use.owner.operation
        if user.name in VIEWS:
            if not _only_outs_uses(user.results[0]):
                return False
        elif user.name != "linalg.generic" or \
                use.operand_number < len(user.operands) - len(user.results):
            return False
    return bool(uses)


def kernels(func: ir.Operation) -> dict[str, Any]:
    """The kernels of ``func`` in program order, its buffers and its outputs."""
    return scan(func)[0]


def scan(func: ir.Operation) -> tuple[dict[str, Any], list[ir.Operation]]:
    """``kernels``' result and the kernel ops themselves, in the same order (ids)."""
    buffers = Buffers()
    ops: list[ir.Operation] = []
    block = func.regions[0].blocks[0]
    for i, arg in enumerate(block.arguments):
        buffers.name(arg, f"arg{i}")
    found: list[dict[str, Any]] = []
    n_const = n_init = 0
    returned = {v for o in block.operations if o.operation.name == "func.return"
                for v in o.operation.operands}
    outputs: list[str] = []
    for op in block.operations:
        op = op.operation
        if op.name == "arith.constant" and isinstance(op.results[0].type, ir.RankedTensorType) \
                and op.results[0] in returned:  # a constant result: a kernel writes it
            elements = math.prod(op.results[0].type.shape)
            found.append(_kernel(op, len(found), buffers, "copy", 0, elements))
            ops.append(op)
        elif op.name == "arith.constant" and isinstance(op.results[0].type,
                                                        ir.RankedTensorType):
            buffers.name(op.results[0], f"const{n_const}")
            n_const += 1
        elif op.name in VIEWS and op.results[0] not in returned:
            buffers.alias(op.results[0], op.operands[0])
        elif op.name in VIEWS:  # a result that is a view: a copy kernel gives it its own buffer
            elements = math.prod(op.results[0].type.shape)
            found.append(_kernel(op, len(found), buffers, "copy", 0, elements))
            ops.append(op)
        elif op.name == "func.return":
            outputs = [buffers.of(v) or "" for v in op.operands]
        elif op.name in IGNORED or not op.results or not any(
                isinstance(r.type, ir.RankedTensorType) for r in op.results):
            continue
        elif _is_init_fill(op) and _only_outs_uses(op.results[0]):
            n_init += 1
            buffers.name(op.results[0], f"init{n_init}")  # only ever an outs: absorbed
        elif op.name == "linalg.generic":
            flops, mac = _body(op)
            iterations = _iterations(op)
            kernel = _kernel(op, len(found), buffers, _classify(op, mac), flops * iterations,
                             iterations)
            outs = list(op.operands)[len(op.operands) - len(op.results):]
            kernel["merged_init"] = any((buffers.of(v) or "").startswith("init") for v in outs)
            found.append(kernel)
            ops.append(op)
        elif op.name in COPIES:
            elements = sum(math.prod(r.type.shape) for r in op.results)
            found.append(_kernel(op, len(found), buffers, "copy", 0, elements))
            ops.append(op)
        else:  # TMTensor and any other tensor op: a kernel over its result's elements
            elements = sum(math.prod(r.type.shape) for r in op.results
                           if isinstance(r.type, ir.RankedTensorType))
            found.append(_kernel(op, len(found), buffers, "other", elements, elements))
            ops.append(op)
    return {"kernels": found, "outputs": outputs,
            "buffers": {n: {"bytes": b, "float": buffers.floating[n]}
                        for n, b in buffers.bytes.items() if not n.startswith("init")}}, ops


def generalized(linalg_path) -> ir.Module:
    """``linalg.mlir`` with named ops generalized, as the kernels are counted on it."""
    module = mlir.parse_file(linalg_path)
    with module.context:
        from torch_mlir import passmanager

        passmanager.PassManager.parse(mlir.GENERALIZE).run(module.operation)
    return module


def analyze(linalg_path, signature: dict[str, Any]) -> dict[str, Any]:
    """Kernels of the lowered function in ``linalg.mlir`` (named ops generalized first)."""
    module = generalized(linalg_path)  # the function lives as long as its module
    result = kernels(mlir.function(module, signature["function"]))
    for i, arg in enumerate(signature["args"]):
        info = result["buffers"].get(f"arg{i}")
        if info is not None:
            info.update(role=arg["kind"], source=arg["source"])
    return result
