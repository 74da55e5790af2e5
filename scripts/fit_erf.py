"""Fit ``pimbuild.codegen.vecmath.ERF_FAR_POLY``: erf on [1, ERF_ONE] as a polynomial in
``t = x - ERF_CENTER``, so that vectorized f32 erf needs neither exp nor a division past 1.

    .venv/bin/python scripts/fit_erf.py [--degree 12]

Least squares in float64 against ``math.erf`` on 20,000 points, reweighted by Lawson's rule
towards the minimax polynomial, then rounded to float32. Prints the float64 fit's largest
error, the float32 Horner evaluation's on [1, 6] (as ``vecmath`` evaluates it, less FMA;
``tests/test_vecmath.py`` checks the compiled code), and the coefficients, highest power
first.
"""

from __future__ import annotations

import argparse
import math

import numpy as np

from pimbuild.codegen.vecmath import ERF_CENTER, ERF_ONE


def fit(degree: int, rounds: int = 80) -> tuple[np.ndarray, float]:
    x = np.linspace(1.0, ERF_ONE, 20_000)
    want = np.array([math.erf(v) for v in x])
    scale = ERF_ONE - 1.0  # t / scale in [-1/2, 1/2] keeps the basis well conditioned
    basis = np.vander((x - ERF_CENTER) / scale, degree + 1, increasing=True)
    weight = np.ones_like(x)
    for i in range(rounds):
        coeffs, *_ = np.linalg.lstsq(basis * weight[:, None], want * weight, rcond=None)
        error = np.abs(basis @ coeffs - want)
        if i > 5:  # Lawson: weight grows where the error is largest
            weight = weight * np.sqrt(error / error.max()) + 1e-12
            weight /= weight.mean()
    return coeffs / scale ** np.arange(degree + 1), float(error.max())


def float32_error(coeffs: np.ndarray) -> float:
    """Largest absolute error of the float32 Horner evaluation on [1, 6]."""
    x = np.linspace(1.0, 6.0, 50_001).astype(np.float32)
    t = np.minimum(x, np.float32(ERF_ONE)) - np.float32(ERF_CENTER)
    y = np.float32(coeffs[-1])
    for c in coeffs[-2::-1]:
        y = y * t + np.float32(c)
    y = np.where(x >= np.float32(ERF_ONE), np.float32(1.0), y)
    return float(np.max(np.abs(y - np.array([math.erf(v) for v in x.astype(np.float64)]))))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--degree", type=int, default=12)
    degree = parser.parse_args().degree
    coeffs, error = fit(degree)
    coeffs = coeffs.astype(np.float32).astype(np.float64)
    print(f"degree {degree}: float64 fit {error:.2e}, float32 {float32_error(coeffs):.2e}")
    print("ERF_FAR_POLY = (" + ", ".join(repr(float(c)) for c in coeffs[::-1]) + ")")


if __name__ == "__main__":
    main()
