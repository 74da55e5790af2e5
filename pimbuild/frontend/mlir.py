"""MLIR helpers shared by the stages: contexts, pass pipelines with repro reports, IR files.

Everything here uses the MLIR Python bindings that ship inside the torch-mlir wheel.
"""

from __future__ import annotations

import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
from torch_mlir import ir
from torch_mlir.dialects import torch as torch_d
from torch_mlir.passmanager import PassManager

from pimbuild.core.errors import StageError

# The element types the lowered program can return, by name, as numpy dtypes (what
# frontend.eager accepts and jit allocates).
NP_DTYPES = {"float32": np.float32, "float64": np.float64, "int64": np.int64, "int32": np.int32,
             "int16": np.int16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_}

# The location frontend.annotate_sources gives every op lowered from a torch node:
# "<module path>|<torch op written>#<torch node>|<aten op>":<node index>.
SOURCE_LOC = re.compile(r'"([^"|]*)\|([^"#]*)#([^"|]*)\|([^"]*)":(\d+)')
ILLEGAL = re.compile(r"failed to legalize operation '([^']+)'")
OPERATOR_NAME = re.compile(r'name = "([^"]+)"')
# operators torch-mlir lacks that a known library emits, and the way round them: (operator,
# a fragment of the submodule's path) -> what to do instead
WAYS_ROUND = {("aten.histc.default", "experts"): (
    "transformers' grouped mixture-of-experts layers count each expert's tokens with it: give "
    "the model's config experts_implementation='batched_mm' (a gather and a batched matmul, "
    "which lower)")}

# torch backend contract -> linalg on tensors (what torch_mlir.fx runs for OutputType.LINALG).
TORCH_BACKEND = ("builtin.module(func.func(torch-match-quantized-custom-ops),"
                 " torchdynamo-export-to-torch-backend-pipeline{ extra-library=})")
TORCH_TO_LINALG = ("builtin.module("
                   "torch-backend-to-linalg-on-tensors-backend-pipeline{allow-non-finites=true})")
# linalg on tensors -> buffers -> scf.parallel / scf.for nests. Results become out-parameters
# (the caller owns the output buffers), memref.copy becomes linalg.copy so that it too is a nest.
# TMTensor ops (scan, scatter, sort: what torch-mlir emits for cumsum, index_put, ...) take
# TM_TENSOR_TO_SCF, which lowers them to sequential loops: they are not parallel nests, so
# they stay on the host.
LINALG_TO_SCF = (
    "builtin.module("
    "one-shot-bufferize{bufferize-function-boundaries"
    " function-boundary-type-conversion=identity-layout-map},"
    " buffer-results-to-out-params{hoist-static-allocs modify-public-functions},"
    " func.func(refback-munge-memref-copy),"
    " func.func(convert-linalg-to-parallel-loops),"
    " cse)"
)
# The same for a module with TMTensor ops: their bufferization leaves tensors One-Shot Analysis
# cannot reason about, so (as in torch-mlir's reference backend) it copies before every write.
TM_TENSOR_TO_SCF = (
    "builtin.module("
    "func.func(tm-tensor-bufferize),"
    " one-shot-bufferize{copy-before-write bufferize-function-boundaries"
    " function-boundary-type-conversion=identity-layout-map},"
    " buffer-results-to-out-params{hoist-static-allocs modify-public-functions},"
    " func.func(refback-munge-memref-copy),"
    " func.func(convert-linalg-to-parallel-loops),"
    " func.func(tm-tensor-to-loops),"
    " cse)"
)
# bf16 arithmetic as f32 arithmetic with explicit rounding (round to nearest even, as
# PyTorch's CPU kernels round each op's result): LLVM would otherwise call compiler-rt's
# __truncsfbf2, which neither libgcc 12 nor valgrind's build target (no AVX512-BF16) has.
# Only for a module that has bf16 (``jit.to_llvm``): arith-expand also expands ops
# LLVM lowers natively in f32 programs.
EMULATE_BF16 = ("builtin.module(func.func("
                "math-extend-to-supported-types{target-type=f32},"
                " arith-emulate-unsupported-floats{source-types=bf16 target-type=f32},"
                " arith-expand{include-bf16=true}))")
ELEMENTWISE_FUSION = "builtin.module(func.func(linalg-fuse-elementwise-ops))"
GENERALIZE = "builtin.module(func.func(linalg-generalize-named-ops))"


def new_context() -> ir.Context:
    """A context with the torch dialect and TMTensor loaded (the bindings expose no
    registration for TMTensor: running one of its passes on an empty module loads it), so
    that any IR pimbuild writes parses again."""
    ctx = ir.Context()
    torch_d.register_dialect(ctx)
    ctx.allow_unregistered_dialects = True
    with ctx:
        PassManager.parse("builtin.module(func.func(tm-tensor-bufferize))").run(
            ir.Module.parse("module {}").operation)
    return ctx


def parse_file(path: Path, ctx: ir.Context | None = None) -> ir.Module:
    ctx = ctx or new_context()
    return ir.Module.parse(path.read_text(), context=ctx)


def asm(module: ir.Module) -> str:
    """The module as text, with locations (extract reads them for source attribution)."""
    return module.operation.get_asm(enable_debug_info=True)


def write_ir(module: ir.Module, path: Path) -> Path:
    path.write_text(asm(module) + "\n")
    return path


def run_pipeline(module: ir.Module, pipeline: str, *, stage: str, failure_dir: Path,
                 isolate: str | None = None) -> None:
    """Run ``pipeline`` in place; on failure save the input IR and raise a StageError with a
    one-line repro command (``pimbuild-opt`` runs the same Python pass manager). With
    ``isolate`` (why a crash is expected, said with it), a child process runs it first, so
    that a pass that crashes (a segfault in C++ the bindings cannot catch) is an error, not
    the end of pimbuild."""
    saved = asm(module)

    def fail(summary: str) -> StageError:
        failure_dir.mkdir(parents=True, exist_ok=True)
        path = failure_dir / "input.mlir"
        path.write_text(saved + "\n")
        repro = f"pimbuild-opt --pass-pipeline={shlex.quote(pipeline)} {shlex.quote(str(path))}"
        return StageError(stage, summary, saved_input=path, repro=repro)

    if isolate is not None:
        killed = crash_signal(pipeline, saved)
        if killed is not None:
            raise fail(f"the pass pipeline crashed ({killed}) on this module: {isolate}")
    try:
        with module.context:
            PassManager.parse(pipeline).run(module.operation)
    except ir.MLIRError as e:
        raise fail(diagnostic_summary(e)) from None


def crash_signal(pipeline: str, text: str) -> str | None:
    """Run ``pipeline`` on the IR ``text`` in a child ``pimbuild-opt``: the name of the signal
    that killed it, or None (it finished, or failed with an ordinary error)."""
    proc = subprocess.run([sys.executable, "-m", "pimbuild.commands.opt",
                           f"--pass-pipeline={pipeline}",
                           "/dev/stdin"], input=text, capture_output=True, text=True)
    return signal.Signals(-proc.returncode).name if proc.returncode < 0 else None


def diagnostic_summary(e: ir.MLIRError) -> str:
    """The first error diagnostic, on one line, with its location."""
    if not e.error_diagnostics:
        return e.message
    d = e.error_diagnostics[0]
    message = " ".join(d.message.split())
    unsupported = unsupported_operator(str(d.location), message)
    if unsupported:
        return unsupported
    if len(message) > 300:
        message = message[:300] + " ..."
    return f"{d.location}: {message}"


def unsupported_operator(location: str, message: str) -> str | None:
    """A dialect conversion that found no lowering for an op lowered from a torch node, said
    as that node's operator: "torch-mlir cannot lower aten.roll.default (in 'blocks.0'):
    failed to legalize operation 'torch.constant.int'". None for any other failure."""
    illegal, source = ILLEGAL.search(message), SOURCE_LOC.search(location)
    if illegal is None or source is None:
        return None
    module, written, node, aten = source.group(1, 2, 3, 4)
    named = OPERATOR_NAME.search(message) if illegal.group(1) == "torch.operator" else None
    why = (f"it has no definition of {named.group(1)}" if named  # an op torch-mlir lacks
           else f"failed to legalize operation '{illegal.group(1)}'")
    origin = f"from {written}, " if written and written != aten else ""
    where = f"in '{module}'" if module else "in the model's forward"
    advice = next((way for (op, part), way in WAYS_ROUND.items()
                   if op == aten and part in module), "replace it with operators torch-mlir "
                  "lowers, or leave it out of the model")
    return f"torch-mlir cannot lower {aten} ({origin}node '{node}' {where}): {why}; {advice}"


def walk(op: ir.Operation):
    """Pre-order walk of every operation nested in ``op`` (excluding ``op``)."""
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                yield child.operation
                yield from walk(child.operation)


def defined_inside(value: ir.Value, root: ir.Operation) -> bool:
    """Is ``value`` defined within ``root`` (a result of a nested op or a nested block arg)?"""
    owner = value.owner
    op = owner.owner if isinstance(owner, ir.Block) else owner.operation
    while op is not None:
        if op == root:
            return True
        parent = op.parent
        op = parent.operation if parent is not None else None
    return False


def free_values(root: ir.Operation) -> list[ir.Value]:
    """Every value ``root`` uses that is defined outside it, once each, in first-use order:
    its operands, then what its regions (at any depth) capture."""
    used = [v for op in [root, *walk(root)] for v in op.operands
            if not defined_inside(v, root)]
    return list(dict.fromkeys(used))  # IR values hash and compare by the value they wrap


def declare(module: ir.Module, name: str) -> None:
    """``func.func private @name(i64)``: an external marker function."""
    with ir.InsertionPoint.at_block_begin(module.body), ir.Location.unknown(module.context):
        i64 = ir.IntegerType.get_signless(64)
        ir.Operation.create("func.func", regions=1, attributes={
            "sym_name": ir.StringAttr.get(name),
            "function_type": ir.TypeAttr.get(ir.FunctionType.get([i64], [])),
            "sym_visibility": ir.StringAttr.get("private")})


def call(name: str, operands: list[ir.Value], loc: ir.Location) -> None:
    """``func.call @name(operands)`` at the current insertion point."""
    with loc:
        ir.Operation.create("func.call", operands=operands,
                            attributes={"callee": ir.FlatSymbolRefAttr.get(name)})


def call_marker(name: str, ident: int, loc: ir.Location) -> None:
    """``func.call @name(<ident : i64>)`` at the current insertion point."""
    with loc:
        i64 = ir.IntegerType.get_signless(64)
        const = ir.Operation.create("arith.constant", results=[i64],
                                    attributes={"value": ir.IntegerAttr.get(i64, ident)})
    call(name, [const.result], loc)


TARGET = "pimbuild.target"  # marks a function ``outline`` made for a device's unit


def host_functions(module: ir.Module) -> list[ir.Operation]:
    """The functions of ``module`` the host compiles for itself: all but those marked
    ``TARGET``, which the host runs only to check the hybrid program."""
    return [op.operation for op in module.body.operations
            if TARGET not in op.operation.attributes]


def function(module: ir.Module, name: str) -> ir.Operation:
    """The ``func.func`` called ``name``."""
    return next(op.operation for op in module.body.operations
                if ir.StringAttr(op.operation.attributes["sym_name"]).value == name)


def element_types(module: ir.Module) -> set[str]:
    """The element types of the values ``module``'s ops produce (``f32``, ``bf16``, ...)."""
    def element(t: ir.Type) -> str:
        try:
            return str(ir.ShapedType(t).element_type)
        except ValueError:  # not a tensor or memref
            return str(t)
    return {element(r.type) for op in walk(module.operation) for r in op.results}


def has_dialect(module: ir.Module, dialect: str) -> bool:
    """Does any op of ``module`` belong to ``dialect``?"""
    return any(op.name.startswith(f"{dialect}.") for op in walk(module.operation))
