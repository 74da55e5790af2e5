"""Host code generation: ``math.exp``, ``math.tanh`` and ``math.erf`` on f32 as arithmetic
that LLVM vectorizes.

``convert-math-to-llvm`` turns ``math.exp`` into ``llvm.exp``, and ``convert-math-to-libm``
``math.tanh`` and ``math.erf`` into calls of libm's ``tanhf`` and ``erff``. The
ExecutionEngine has no vector math library, so LLVM calls libm once per element and the loop
around it stays scalar: GPT-2's GELU (``tanh``), BERT's (``erf``), softmax and SiLU (``exp``)
ran at one element per call. MLIR's ``math-polynomial-approximation`` would rewrite them, but
it is a test pass that this torch-mlir build does not register. So ``expand`` rewrites the
three here, before the LLVM dialect, into floating-point and integer arithmetic only:

- ``exp``: Cody-Waite reduction ``x = n ln2 + r`` with ``|r| <= ln2 / 2`` and ``n`` an
  integer, Cephes ``expf``'s polynomial for ``e^r`` (S. L. Moshier, Cephes Math Library; about
  one ulp), and ``2^n`` built from exponent bits in two halves so that results down to
  float32's smallest subnormal round as IEEE multiplication rounds them. ``x`` is clamped to
  ``[-104, 88.75]`` first: past the ends the result is 0 or overflows to ``inf``, as libm's. A
  NaN passes through.
- ``tanh``: its odd Taylor polynomial to ``x^9`` for ``|x| < 1/4`` (error under 1e-8
  relative), else ``sign(x) (1 - e) / (1 + e)`` with ``e = exp(-2|x|)`` (the form of MLIR's
  ``math-expand-ops``), which cancels only where ``e`` is near 1, which is what the polynomial
  covers.
- ``erf``: ``x P(x^2)`` for ``|x| < 1``, a polynomial in ``|x| - 2.46`` up to 3.92 and 1 past
  it (``ERF_POLY``, ``ERF_FAR_POLY``): only multiply-adds, where ``1 - e^(-x^2) R(1 / (1 +
  |x| / 2))`` past 1 cost an exp and a division per element (GELU's erf form ran at 2.2x
  eager's time). Both polynomials run on every element; one Horner chain with coefficients
  chosen per lane ran 5-10% slower (docs/measurements/erf_epyc.md).

``reciprocals`` also turns a division by a float constant into a multiplication by its
reciprocal, as PyTorch's kernels compute GELU (``x * M_SQRT1_2``, where torch-mlir writes ``x
/ 1.41421354``): a vector division costs several multiplications' time, and LLVM keeps it
without ``arcp`` (GELU's erf form ran at 1.17-1.37x eager's time with it on a Zen 5 EPYC VM).
A power of two divides exactly as before; another divisor may move the result by an ulp
(hardsigmoid's ``x / 6``, which ATen's kernel divides: ``tests/test_recipes.py`` compares
its NaN exactly and its values to an ulp).

Their multiplies, adds and subtracts carry ``fastmath<contract>`` (``CONTRACTED``), so that
LLVM fuses Horner's steps into FMA where the host has it. Other types and other math ops keep
their libm calls. Tests check all three against float64
results on grids, at the ends and on NaN and infinities (``tests/test_vecmath.py``).
"""

from __future__ import annotations

import numpy as np
from torch_mlir import ir
from torch_mlir.dialects import arith, math

from pimbuild.codegen.bounds import owner
from pimbuild.frontend import mlir

LOG2E = 1.44269504088896341
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4  # ln 2 = LN2_HI + LN2_LO; LN2_HI * n is exact
EXP_POLY = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2,
            1.6666665459e-1, 5.0000001201e-1)  # Cephes expf, highest power first
EXP_MIN, EXP_MAX = -104.0, 88.75  # below: 0 (under 2^-149 / 2); above: past FLT_MAX
TANH_SMALL = 0.25
# erf x = x P(x^2) for |x| < 1: a least-squares fit of erf(x) / x on [0, 1], float64 against
# Python's math.erf, coefficients rounded to float32, highest power first
# (``tests/test_vecmath.py`` checks its error).
ERF_POLY = (8.006874122656882e-05, -8.053751080296934e-04, 5.192957818508148e-03,
            -2.68560703843832e-02, 1.1283634603023529e-01, -3.761262893676758e-01,
            1.128379225730896)
ERF_ONE, ERF_CENTER = 3.92, 2.46  # 1 - erf(3.92) = 3.0e-8: past it erf rounds to 1 in f32
# erf x on [1, ERF_ONE] as a polynomial in x - ERF_CENTER, highest power first: Lawson's
# minimax least squares of degree 12, rounded to float32 (scripts/fit_erf.py prints them).
ERF_FAR_POLY = (-9.124747521127574e-06, 2.542066795285791e-05, 5.1667077059391886e-05,
                -0.0003016761620528996, 0.00039112992817535996, 0.00046216780901886523,
                -0.002963507315143943, 0.006797654088586569, -0.009904828853905201,
                0.009832995943725109, -0.006535762920975685, 0.0026561934500932693,
                0.9994966983795166)
# Multiplies, adds and subtracts carry ``contract``, so LLVM fuses them into FMA where the host
# has it (without it, Horner's rule ran as separate vmulps and vaddps).
CONTRACTED = (arith.AddFOp, arith.SubFOp, arith.MulFOp)
TANH_POLY = (62 / 2835, -17 / 315, 2 / 15, -1 / 3)  # tanh x = x + x^3 P(x^2), highest first


class _Builder:
    """Scalar f32 arithmetic inserted before one op."""

    def __init__(self, before: ir.Operation) -> None:
        self.ip, self.loc = ir.InsertionPoint(before), before.location
        self.f32, self.i32 = ir.F32Type.get(), ir.IntegerType.get_signless(32)
        self.contract = ir.Attribute.parse("#arith.fastmath<contract>")

    def const(self, value: float) -> ir.Value:
        return arith.ConstantOp(self.f32, float(value), loc=self.loc, ip=self.ip).result

    def int_const(self, value: int) -> ir.Value:
        return arith.ConstantOp(self.i32, value, loc=self.loc, ip=self.ip).result

    def op(self, cls, *operands, **kw) -> ir.Value:
        if cls in CONTRACTED:
            kw.setdefault("fastmath", self.contract)
        return cls(*operands, loc=self.loc, ip=self.ip, **kw).result

    def poly(self, x: ir.Value, coefficients: tuple[float, ...]) -> ir.Value:
        """Horner's rule, highest power first."""
        p = self.const(coefficients[0])
        for c in coefficients[1:]:
            p = self.op(arith.AddFOp, self.op(arith.MulFOp, p, x), self.const(c))
        return p

    def cmp(self, predicate: str, a: ir.Value, b: ir.Value) -> ir.Value:
        return self.op(arith.CmpFOp, getattr(arith.CmpFPredicate, predicate.upper()), a, b)

    def pow2(self, k: ir.Value) -> ir.Value:
        """2^k for an i32 k in [-126, 127], from its exponent bits."""
        biased = self.op(arith.AddIOp, k, self.int_const(127))
        bits = self.op(arith.ShLIOp, biased, self.int_const(23))
        return self.op(arith.BitcastOp, self.f32, bits)

    def exp(self, x: ir.Value) -> ir.Value:
        clamped = self.op(arith.MinimumFOp, self.op(arith.MaximumFOp, x, self.const(EXP_MIN)),
                          self.const(EXP_MAX))
        half = self.const(0.5)
        n = self.op(math.FloorOp, self.op(arith.AddFOp,
                                          self.op(arith.MulFOp, clamped, self.const(LOG2E)),
                                          half))
        r = self.op(arith.SubFOp, clamped, self.op(arith.MulFOp, n, self.const(LN2_HI)))
        r = self.op(arith.SubFOp, r, self.op(arith.MulFOp, n, self.const(LN2_LO)))
        p = self.poly(r, EXP_POLY)
        y = self.op(arith.AddFOp, self.op(arith.AddFOp, self.op(
            arith.MulFOp, p, self.op(arith.MulFOp, r, r)), r), self.const(1.0))
        k = self.op(arith.FPToSIOp, self.i32, n)  # in [-150, 128]
        k1 = self.op(arith.ShRSIOp, k, self.int_const(1))
        k2 = self.op(arith.SubIOp, k, k1)
        y = self.op(arith.MulFOp, self.op(arith.MulFOp, y, self.pow2(k1)), self.pow2(k2))
        return self.op(arith.SelectOp, self.cmp("uno", x, x), x, y)

    def tanh(self, x: ir.Value) -> ir.Value:
        ax = self.op(math.AbsFOp, x)  # tanh |x|, then x's sign (-0 stays -0)
        x2 = self.op(arith.MulFOp, ax, ax)
        small = self.op(arith.AddFOp, ax, self.op(arith.MulFOp, self.op(arith.MulFOp, ax, x2),
                                                  self.poly(x2, TANH_POLY)))
        e = self.exp(self.op(arith.MulFOp, ax, self.const(-2.0)))
        one = self.const(1.0)
        large = self.op(arith.DivFOp, self.op(arith.SubFOp, one, e),
                        self.op(arith.AddFOp, one, e))
        near = self.cmp("olt", ax, self.const(TANH_SMALL))
        return self.op(math.CopySignOp, self.op(arith.SelectOp, near, small, large), x)

    def erf(self, x: ir.Value) -> ir.Value:
        ax = self.op(math.AbsFOp, x)  # erf |x|, then x's sign
        small = self.op(arith.MulFOp, ax, self.poly(self.op(arith.MulFOp, ax, ax), ERF_POLY))
        one = self.const(1.0)
        t = self.op(arith.SubFOp, self.op(arith.MinimumFOp, ax, self.const(ERF_ONE)),
                    self.const(ERF_CENTER))
        large = self.op(arith.SelectOp, self.cmp("oge", ax, self.const(ERF_ONE)), one,
                        self.poly(t, ERF_FAR_POLY))
        near = self.cmp("olt", ax, one)
        return self.op(math.CopySignOp, self.op(arith.SelectOp, near, small, large), x)


REWRITES = {"math.exp": _Builder.exp, "math.tanh": _Builder.tanh, "math.erf": _Builder.erf}
RECIPROCALS = True  # False: keep x / c (``bench/codegen_ab.py vecmath.RECIPROCALS``)
FLOATS = {"f32": np.float32, "f64": np.float64}


def _reciprocal(divisor: ir.Value) -> ir.Attribute | None:
    """1 / c as a constant of c's type, for ``divisor`` an f32 or f64 ``arith.constant`` c
    whose reciprocal (computed in float64, then rounded to that type) is a normal number;
    else None."""
    kind = FLOATS.get(str(divisor.type))
    defining = owner(divisor)
    if kind is None or isinstance(defining, ir.Block) or defining.name != "arith.constant":
        return None
    c = ir.FloatAttr(defining.attributes["value"]).value
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        inverse = kind(1.0 / np.float64(c))
    if not np.isfinite(inverse) or abs(inverse) < np.finfo(kind).tiny:
        return None
    return ir.FloatAttr.get(divisor.type, float(inverse))


def reciprocals(module: ir.Module) -> int:
    """Every ``arith.divf x, c`` with ``_reciprocal(c)`` in ``module``'s host functions becomes
    ``arith.mulf x, 1 / c`` (same fastmath flags); returns how many."""
    if not RECIPROCALS:
        return 0
    done = 0
    with module.context:
        for func in mlir.host_functions(module):
            for op in [o for o in mlir.walk(func) if o.name == "arith.divf"]:
                with op.location:
                    inverse = _reciprocal(op.operands[1])
                if inverse is None:
                    continue
                ip = ir.InsertionPoint(op)
                r = arith.ConstantOp(op.operands[1].type, inverse, loc=op.location, ip=ip)
                flags = ({"fastmath": op.attributes["fastmath"]}
                         if "fastmath" in op.attributes else {})
                mul = arith.MulFOp(op.operands[0], r.result, loc=op.location, ip=ip, **flags)
                op.results[0].replace_all_uses_with(mul.result)
                op.erase()
                done += 1
    return done


def expand(module: ir.Module) -> int:
    """Rewrite every f32 ``math.exp``, ``math.tanh`` and ``math.erf`` in ``module``'s host
    functions (``mlir.host_functions``); returns how many it rewrote."""
    done = 0
    with module.context:
        for func in mlir.host_functions(module):
            for op in [o for o in mlir.walk(func) if o.name in REWRITES]:
                if op.operands[0].type != ir.F32Type.get():
                    continue
                with op.location:
                    value = REWRITES[op.name](_Builder(op), op.operands[0])
                op.results[0].replace_all_uses_with(value)
                op.erase()
                done += 1
    return done
