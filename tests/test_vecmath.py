"""f32 exp, tanh and erf as vectorizable arithmetic (``pimbuild.codegen.vecmath``), against float64:
on dense grids their largest errors are 8.3e-8, 1.7e-7 and 1.7e-7 relative (erf past 1:
8.4e-8 absolute; with FMA, on an AMD EPYC host), where libm's calls here give 6.0e-8, 1.6e-7
and 6.8e-8 (4.0e-8); 0 and inf at the ends of exp, NaN through all three."""

from __future__ import annotations

import math
import re
from pathlib import Path
from string import Template

import numpy as np
import pytest
from torch_mlir import ir
from torch_mlir.execution_engine import ExecutionEngine

from pimbuild.codegen import jit, vecmath
from pimbuild.frontend import mlir

UNARY = Template("""
func.func @f(%x: memref<${N}xf32>, %y: memref<${N}xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant ${N} : index
  scf.for %i = %c0 to %n step %c1 {
    %v = memref.load %x[%i] : memref<${N}xf32>
    %r = math.${OP} %v : f32
    memref.store %r, %y[%i] : memref<${N}xf32>
  }
  return
}
""")


def apply(op: str, x: np.ndarray, tmp_path: Path, expand: bool = True) -> tuple[int, np.ndarray]:
    x = np.ascontiguousarray(x, dtype=np.float32)
    module = ir.Module.parse(UNARY.substitute(N=x.size, OP=op), ir.Context())
    done = vecmath.expand(module) if expand else 0  # else libm's, as before vecmath
    jit.prepare_for_llvm(module)
    mlir.run_pipeline(module, jit.SCF_TO_LLVM, stage="test", failure_dir=tmp_path / "failure")
    (y,) = jit.invoke(ExecutionEngine(module, opt_level=3), "f", [x],
                      [{"shape": [x.size], "dtype": "float32"}])
    return done, y


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.max(np.abs(got.astype(np.float64) - want) / np.abs(want)))


def test_exp_is_within_a_few_ulps_and_keeps_its_ends(tmp_path: Path) -> None:
    x = np.concatenate([np.linspace(-87.0, 88.7, 200_001), np.linspace(-1e-3, 1e-3, 2001)])
    done, y = apply("exp", x, tmp_path)
    assert done == 1
    assert relative_error(y, np.exp(x.astype(np.float32).astype(np.float64))) < 1.5e-7
    ends = np.array([-np.inf, -200.0, -104.5, -103.0, -90.0, 88.8, 100.0, np.inf, np.nan, 0.0])
    _, y = apply("exp", ends, tmp_path)
    with np.errstate(over="ignore"):
        want = np.exp(ends.astype(np.float32))
    assert y[0] == 0 and y[1] == 0 and y[2] == 0 and np.isinf(y[5:8]).all()
    assert np.isnan(y[8]) and y[9] == 1.0
    assert abs(float(y[3]) - float(want[3])) <= 2e-45 and abs(y[4] / want[4] - 1) < 1e-4
    _, libm = apply("exp", ends, tmp_path, expand=False)
    np.testing.assert_array_equal(np.isinf(y), np.isinf(libm))


def test_tanh_is_within_a_few_ulps_near_zero_and_far_from_it(tmp_path: Path) -> None:
    x = np.concatenate([np.linspace(-12.0, 12.0, 200_001), np.linspace(-0.3, 0.3, 20_001),
                        np.geomspace(1e-30, 1e-2, 1001)])
    x = x[x != 0]
    done, y = apply("tanh", x, tmp_path)
    assert done == 1
    assert relative_error(y, np.tanh(x.astype(np.float32).astype(np.float64))) < 3e-7
    ends = np.array([-np.inf, -100.0, 0.0, -0.0, 100.0, np.inf, np.nan])
    _, y = apply("tanh", ends, tmp_path)
    assert list(y[:2]) == [-1.0, -1.0] and list(y[4:6]) == [1.0, 1.0] and np.isnan(y[6])
    assert y[2] == 0 and y[3] == 0 and np.signbit(y[3])


@pytest.mark.parametrize("op", ["exp", "tanh", "erf"])
def test_the_loop_around_them_calls_no_libm(op: str) -> None:
    module = ir.Module.parse(UNARY.substitute(N=64, OP=op), ir.Context())
    assert vecmath.expand(module) == 1
    left = set(re.findall(r"math\.(\w+)", str(module)))
    assert left <= {"floor", "absf", "copysign"}  # LLVM has instructions for these
    assert ("floor" in left) == (op != "erf")  # exp's reduction; erf is polynomials only


def test_erf_is_within_a_few_ulps_near_zero_and_far_from_it(tmp_path: Path) -> None:
    x = np.concatenate([np.linspace(-6.0, 6.0, 120_001), np.geomspace(1e-30, 1.0, 2001),
                        np.linspace(0.99, 1.01, 2001)])
    x = x[x != 0].astype(np.float32)
    done, y = apply("erf", x, tmp_path)
    assert done == 1
    want = np.array([math.erf(v) for v in x.astype(np.float64)])
    near = np.abs(x) < 1  # relative there (erf x ~ 1.13 x), absolute past it (erf ~ 1)
    assert relative_error(y[near], want[near]) < 3e-7
    assert np.max(np.abs(y[~near] - want[~near])) < 1.5e-7
    ends = np.array([-np.inf, -10.0, 0.0, -0.0, 10.0, np.inf, np.nan])
    _, y = apply("erf", ends, tmp_path)
    assert list(y[:2]) == [-1.0, -1.0] and list(y[4:6]) == [1.0, 1.0] and np.isnan(y[6])
    assert y[2] == 0 and y[3] == 0 and np.signbit(y[3])


def test_host_code_generation_rewrites_them(tmp_path: Path) -> None:
    module = ir.Module.parse(UNARY.substitute(N=8, OP="exp"), ir.Context())
    done = jit.to_llvm(module, 1, stage="test", failure_dir=tmp_path / "failure")
    assert done["vectorized_math_ops"] == 1 and "llvm.intr.exp" not in str(module)


DIVIDE = Template("""
func.func @f(%x: memref<${N}x${T}>, %d: memref<1x${T}>, %y: memref<${N}x${T}>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = arith.constant ${N} : index
  %c = arith.constant ${C} : ${T}
  %v = memref.load %d[%c0] : memref<1x${T}>
  scf.for %i = %c0 to %n step %c1 {
    %a = memref.load %x[%i] : memref<${N}x${T}>
    %q = arith.divf %a, ${BY} fastmath<reassoc,contract> : ${T}
    memref.store %q, %y[%i] : memref<${N}x${T}>
  }
  return
}
""")


def divide(x: np.ndarray, c: str, tmp_path: Path, by: str = "%c", kind: str = "f32"
           ) -> tuple[int, str, np.ndarray]:
    """``x / c`` (``by="%v"``: by a value loaded at run time, 2) through ``reciprocals``."""
    dtype = {"f32": np.float32, "f64": np.float64}[kind]
    x = np.ascontiguousarray(x, dtype=dtype)
    module = ir.Module.parse(DIVIDE.substitute(N=x.size, T=kind, C=c, BY=by), ir.Context())
    done = vecmath.reciprocals(module)
    text = str(module)
    jit.prepare_for_llvm(module)
    mlir.run_pipeline(module, jit.SCF_TO_LLVM, stage="test", failure_dir=tmp_path / "failure")
    name = {"f32": "float32", "f64": "float64"}[kind]
    (y,) = jit.invoke(ExecutionEngine(module, opt_level=3), "f", [x, np.full(1, 2, dtype)],
                      [{"shape": [x.size], "dtype": name}])
    return done, text, y


def test_a_division_by_a_constant_multiplies_by_its_reciprocal(tmp_path: Path) -> None:
    """GELU's x / sqrt(2) as torch-mlir writes it becomes x * (1 / sqrt(2)) rounded once, as
    PyTorch computes it (within an ulp of the quotient); by a power of two it is exact."""
    x = np.random.default_rng(0).standard_normal(10_000).astype(np.float32)
    done, text, y = divide(x, "1.41421354", tmp_path)
    assert done == 1 and "arith.divf" not in text
    assert "arith.mulf" in text and "fastmath<reassoc,contract>" in text
    assert np.array_equal(y, x * np.float32(1 / np.float64(np.float32(1.41421354))))
    quotient = x / np.float32(1.41421354)
    assert np.max(np.abs(y - quotient) / np.spacing(np.abs(quotient))) <= 1
    done, _, y = divide(x, "4096.0", tmp_path)
    assert done == 1 and np.array_equal(y, x / np.float32(4096))
    done, _, y = divide(x.astype(np.float64), "3.0", tmp_path, kind="f64")
    assert done == 1 and np.max(np.abs(y - x.astype(np.float64) / 3)) < 1e-15


@pytest.mark.parametrize("c, by, divisor", [("0.0", "%c", 0.0), ("3.0e+38", "%c", 3.0e38),
                                            ("0x7F800000", "%c", np.inf), ("3.0", "%v", 2.0)])
def test_a_division_without_a_normal_reciprocal_stays_one(tmp_path: Path, c: str, by: str,
                                                          divisor: float) -> None:
    """By zero (inf, NaN as IEEE divides), by 3e38 (the reciprocal is subnormal), by inf,
    and by a value known only at run time (2): left as divisions."""
    x = np.array([1.0, -2.0, 0.0, 3.0e-30], np.float32)
    done, text, y = divide(x, c, tmp_path, by=by)
    assert done == 0 and "arith.divf" in text
    with np.errstate(divide="ignore", invalid="ignore", under="ignore"):
        assert np.array_equal(y, x / np.float32(divisor), equal_nan=True)
