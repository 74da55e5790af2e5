"""Compile ``scf.mlir`` to LLVM and run it on the MLIR ExecutionEngine.

The lowered function takes its arguments (parameters and inputs, as ``signature.json`` lists
them) followed by one out-parameter per result, all as memrefs.
"""

from __future__ import annotations

import ctypes
import functools
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
from torch_mlir import ir
from torch_mlir.execution_engine import ExecutionEngine
from torch_mlir.runtime import as_ctype, make_nd_memref_descriptor, make_zero_d_memref_descriptor

from pimbuild.codegen import blocking, panels, relayout, vecmath, vectile
from pimbuild.codegen.runtime import compiler
from pimbuild.core.errors import StageError, first_line
from pimbuild.frontend import mlir
from pimbuild.frontend.mlir import NP_DTYPES

# scf + memref -> LLVM dialect. Deallocation runs here, after extract has counted the nests.
# lower-affine runs again after expand-strided-metadata, which computes a view's offset
# with affine.apply where it depends on a loop's induction variable (a triangular loop's
# subviews).
SCF_TO_LLVM = (
    "builtin.module("
    "func.func(buffer-deallocation-pipeline),"
    " lower-affine, convert-scf-to-cf, convert-vector-to-llvm, expand-strided-metadata,"
    " lower-affine, finalize-memref-to-llvm,"
    " convert-math-to-llvm, convert-math-to-libm, convert-arith-to-llvm,"
    " convert-func-to-llvm, convert-cf-to-llvm, convert-ub-to-llvm,"
    " reconcile-unrealized-casts)"
)


def prepare_for_llvm(module: ir.Module) -> None:
    """Give every defined function a C interface (``_mlir_ciface_<name>``)."""
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and len(op.regions[0].blocks) > 0:
            op.attributes["llvm.emit_c_interface"] = ir.UnitAttr.get(module.context)


def to_llvm(module: ir.Module, register_block: int, *, stage: str, failure_dir: Path,
            inspect: Callable[[ir.Module], None] | None = None) -> dict[str, int]:
    """Host code generation in place: operands copied so each row's reduction is contiguous
    (``relayout``) and vector register tiles (``vectile``; neither at
    ``register_block`` 1, which leaves the host code as lowered), their packed panels
    (``panels``), loop interchange and register blocking (``blocking``),
    f32 exp, tanh and erf as arithmetic and divisions by a constant as
    multiplications (``vecmath``), C interfaces, bf16
    arithmetic as f32 (``mlir.EMULATE_BF16``), then the LLVM dialect. Returns how many
    nests (ops) each of the first seven rewrote. ``inspect`` sees the module after them,
    while its loops are still loops."""
    tiles = register_block > 1
    done = {"relaid_out_nests": relayout.relayout(module) if tiles else 0,
            "vector_tiled_nests": vectile.tile(module) if tiles else 0,
            "packed_nests": panels.packed(module),
            "interchanged_nests": blocking.interchange(module),
            "register_blocked_nests": blocking.register_block(module, register_block),
            "vectorized_math_ops": vecmath.expand(module),
            "reciprocal_divisions": vecmath.reciprocals(module)}
    if inspect is not None:
        inspect(module)
    prepare_for_llvm(module)
    if "bf16" in mlir.element_types(module):
        from pimbuild.frontend.transforms import truncate_through_f32

        truncate_through_f32(module)
        mlir.run_pipeline(module, mlir.EMULATE_BF16, stage=stage, failure_dir=failure_dir)
    mlir.run_pipeline(module, SCF_TO_LLVM, stage=stage, failure_dir=failure_dir)
    return done


def compile_scf(scf_path: Path, failure_dir: Path, register_block: int) -> ExecutionEngine:
    module = mlir.parse_file(scf_path)
    to_llvm(module, register_block, stage="jit", failure_dir=failure_dir)
    return engine_of(module)


def engine_of(module: ir.Module, opt_level: int = 3) -> ExecutionEngine:
    """MLIR's ExecutionEngine for an LLVM-dialect module; its failure (a type the LLVM
    translation refuses) is a StageError, not a traceback."""
    try:
        return ExecutionEngine(module, opt_level=opt_level)
    except RuntimeError as e:
        raise StageError("jit", f"LLVM could not compile the lowered module: {e}") from None


def write_object(module: ir.Module, symbols: dict[str, ctypes.c_void_p],
                 path: Path) -> ExecutionEngine:
    """Compile an LLVM-dialect module to an object file (its external calls stay relocations;
    ``symbols`` binds them in the JIT's own copy). Returns the engine, ready to invoke."""
    engine = engine_of(module)
    for name, address in symbols.items():
        engine.raw_register_runtime(name, address)
    engine.dump_to_object_file(str(path))
    if not path.is_file():
        raise StageError("instrument", f"the ExecutionEngine wrote no object file {path}")
    return engine


def load_llvm(llvm_path: Path, symbols: dict[str, ctypes.c_void_p],
              opt_level: int = 3) -> ExecutionEngine:
    """An ExecutionEngine for an LLVM-dialect module whose external functions ``symbols``
    (name -> address) provides. They are bound before the first lookup compiles the module,
    so two marker runtimes loaded in one process never resolve to each other."""
    engine = engine_of(mlir.parse_file(llvm_path), opt_level)
    for name, address in symbols.items():
        engine.raw_register_runtime(name, address)
    return engine


class SharedObject:
    """A compiled module loaded with the dynamic loader: ``lookup`` and ``invoke`` as the
    ExecutionEngine's (the packed ``_mlir__mlir_ciface_<name>`` wrapper it generates is in the
    object file it wrote), with no code generation."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self.lib = lib

    def lookup(self, name: str):
        try:
            func = getattr(self.lib, f"_mlir__mlir_ciface_{name}")
        except AttributeError:
            raise RuntimeError(f"Unknown function {name}") from None
        func.restype, func.argtypes = None, [ctypes.c_void_p]
        return func

    def invoke(self, name: str, *ctypes_args) -> None:
        packed = (ctypes.c_void_p * len(ctypes_args))(
            *[ctypes.cast(a, ctypes.c_void_p) for a in ctypes_args])
        self.lookup(name)(packed)


def load_object(object_path: Path, libraries: list[Path], cc: str) -> SharedObject:
    """An object file ``write_object`` wrote, linked by ``cc`` into a shared library against
    ``libraries`` (what its external calls name: the marker runtime, by absolute path, so the
    loader binds the copy this process already loaded) and loaded. The ExecutionEngine
    compiles for the large code model, whose absolute addresses in the text are relocated at
    load time (``-z notext``); ``-Bsymbolic`` binds the module's calls to its own functions
    (``forward``) before any of that name the process already has. The library file is
    removed once loaded."""
    with tempfile.TemporaryDirectory(prefix="pimbuild-so-") as tmp:
        so = Path(tmp) / f"{object_path.stem}.so"
        cmd = [cc, "-shared", "-o", str(so), str(object_path),
               *[str(lib.resolve()) for lib in libraries], "-lm",
               "-Wl,-z,notext", "-Wl,-Bsymbolic"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise OSError(f"{' '.join(cmd)} failed: {proc.stderr.strip()}")
        return SharedObject(ctypes.CDLL(str(so)))


def try_load_object(object_path: Path, libraries: list[Path]
                    ) -> tuple[SharedObject | None, str]:
    """``load_object`` with the system C compiler, or None and why (one line) where there is
    no compiler or the link or the load is refused: the caller then compiles the LLVM
    dialect instead."""
    try:
        return load_object(object_path, libraries, compiler()), ""
    except (OSError, StageError) as e:
        return None, first_line(e)


def output_buffers(outputs: list[dict]) -> list[np.ndarray]:
    """Zeroed output buffers for ``invoke``, every page already touched."""
    buffers = [np.empty(o["shape"], dtype=NP_DTYPES[o["dtype"]]) for o in outputs]
    for b in buffers:
        b.fill(0)
    return buffers


@functools.cache
def _descriptor_type(rank: int, ctype: type) -> type[ctypes.Structure]:
    """One memref descriptor class per rank and element type. torch-mlir's
    ``get_ranked_memref_descriptor`` defines a new class on every call, and ``ctypes.pointer``
    keeps every class it has made a pointer type for: a process that called a forward a few
    thousand times (the profile stage's timing loop) kept hundreds of MB of dead classes."""
    if rank == 0:
        return make_zero_d_memref_descriptor(ctype)
    return make_nd_memref_descriptor(rank, ctype)


def descriptor(array: np.ndarray) -> ctypes.Structure:
    """The ranked memref descriptor of a C-contiguous array (strides in elements)."""
    ctype = as_ctype(array.dtype)
    d = _descriptor_type(array.ndim, ctype)()
    d.allocated = array.ctypes.data
    d.aligned = array.ctypes.data_as(ctypes.POINTER(ctype))
    d.offset = 0
    if array.ndim:
        d.shape = (ctypes.c_longlong * array.ndim)(*array.shape)
        d.strides = (ctypes.c_longlong * array.ndim)(*[s // array.itemsize
                                                       for s in array.strides])
    return d


def prepare(engine: ExecutionEngine, function: str, args: list[np.ndarray],
            outputs: list[dict], into: list[np.ndarray] | None = None
            ) -> tuple[Callable[[], None], list[np.ndarray]]:
    """A call of ``function`` on fixed descriptors of ``args`` and output buffers (``into``,
    reused, else newly allocated), and those buffers. A timing loop calls it again and again
    without building descriptors (or touching fresh pages) inside the timed region."""
    results = into if into is not None else output_buffers(outputs)
    arrays = [np.ascontiguousarray(a) for a in args] + results
    pointers = [ctypes.pointer(ctypes.pointer(descriptor(a))) for a in arrays]

    def call() -> None:
        engine.invoke(function, *pointers)
    call.arrays = arrays  # the descriptors point into these (copies made here included)
    return call, results


def invoke(engine: ExecutionEngine, function: str, args: list[np.ndarray],
           outputs: list[dict], into: list[np.ndarray] | None = None) -> list[np.ndarray]:
    """Call ``function`` once with ``args`` and output buffers (``into``, reused, else newly
    allocated); return them."""
    call, results = prepare(engine, function, args, outputs, into)
    call()
    return results
