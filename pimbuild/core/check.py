"""Comparing a lowered program's results with PyTorch eager's: every target's reinsert stage
fails unless its program's outputs are within ``tolerance`` of eager's by ``difference``,
or, where they are not, its outputs are as close to a float64 run of the model as eager's
(``judge``)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

RTOL = 1e-5
# A program that computes in a narrower float type is held to that type's tolerance
# (torch.testing's rtol for it): its ops round where eager's fused kernels may not (a bf16
# softmax rounds its exp, sum and quotient; eager rounds once).
FLOAT_TYPES = {"f64": RTOL, "f32": RTOL, "f16": 1e-3, "bf16": 1.6e-2}


def tolerance(signature: dict) -> float:
    """The check's tolerance for a lowered program: its narrowest float type's
    (``signature.json`` ``float_types``, which ``lower`` records)."""
    return max([RTOL] + [FLOAT_TYPES[t] for t in signature.get("float_types", ())])


def _misplaced(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Where two float arrays of one shape disagree on NaN or an infinity: one is finite and
    the other not, or both are not and differ (NaN counts as equal to NaN)."""
    finite = np.isfinite(want)
    same = (got == want) | np.isnan(got) & np.isnan(want)
    return (finite != np.isfinite(got)) | ~finite & ~same


def difference(got: np.ndarray, want: np.ndarray) -> float:
    """How far ``got`` is from eager's ``want``: the largest error relative to ``want``'s
    largest finite magnitude for floats, with NaN and infinities required at the same places;
    integers and booleans must be equal. ``inf`` when they disagree in kind, shape or dtype;
    never NaN, so a check against it cannot pass vacuously."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return float("inf")
    if got.size == 0:
        return 0.0
    if not np.issubdtype(want.dtype, np.floating):
        return 0.0 if np.array_equal(got, want) else float("inf")
    if _misplaced(got, want).any():
        return float("inf")
    finite = np.isfinite(want)
    if not finite.any():
        return 0.0
    scale = max(float(np.abs(want[finite]).max()), 1e-30)
    return float(np.abs(got[finite].astype(np.float64) - want[finite]).max()) / scale


# An output past the tolerance from eager's is held, with eager's, to the model run in float64
# on the same weights and inputs: it passes if its error from that run is at most MULTIPLIER
# times eager's own error, plus a tenth of the tolerance. A model that eager's float32 cannot
# compute to 1e-5 (column norms of 262144 rows: eager 4.6e-5 from the float64 run, the
# program 7e-7) then passes where the program is no less accurate than eager, and fails
# where it is worse (rows centred at 1000 times their spread, register block 8: 4.3e-5
# against 1.6e-5). The rule and its multipliers are torch.compile's accuracy check
# (``torch._dynamo.utils.same`` with ``fp64_ref``: 2, and 3 for float16 and bfloat16), here
# on ``difference``'s largest error instead of a root mean square, so that one bad element
# is not averaged away.
MULTIPLIER = 2.0
NARROW_MULTIPLIER = 3.0


def judge(results: list[np.ndarray], expected: list[np.ndarray], signature: dict,
          exact: Callable[[], list[np.ndarray] | None] | None = None) -> dict:
    """The check of a program's ``results`` against eager's ``expected``: ``errors`` (each
    output's ``difference``), ``max_rel_error`` (their largest), ``rtol``, ``passed``, and
    where an output was past ``rtol``, ``where`` (what differs in the worst) and ``fp64``:
    the float64 referee's errors of the program and of eager over those outputs (None where
    the model could not run in float64 or no ``exact`` was given). ``exact`` runs the model
    in float64 (float outputs as float64, None where it cannot); it is called only where
    needed."""
    rtol = tolerance(signature)
    errors = [difference(got, want) for got, want in zip(results, expected, strict=True)]
    worst = max(errors, default=0.0)
    verdict = {"max_rel_error": worst, "rtol": rtol, "passed": worst <= rtol,
               "errors": errors}
    if signature.get("scalars"):  # Python scalars of the forward, compared as 0-d tensors
        verdict["scalar_outputs"] = signature["scalars"]
    past = [i for i, e in enumerate(errors) if e > rtol]
    if past:
        i = errors.index(worst)
        verdict["where"] = where(results[i], expected[i], i)
    if not past or not np.isfinite(worst):  # kinds, shapes, NaN places differ: no referee
        return verdict
    reference = exact() if exact is not None else None
    if reference is None:
        return verdict | {"fp64": None}
    m = NARROW_MULTIPLIER if rtol > RTOL else MULTIPLIER
    program = [difference(results[i].astype(np.float64), reference[i]) for i in past]
    eager = [difference(expected[i].astype(np.float64), reference[i]) for i in past]
    passed = all(p <= m * e + rtol / 10 for p, e in zip(program, eager, strict=True))
    return verdict | {"passed": passed, "fp64": {"program": max(program), "eager": max(eager),
                                                "multiplier": m, "outputs": past}}


INDEX_HINT = ("; if it holds indices (of a sort, top-k or arg-max), PyTorch leaves the order "
              "of equal values unspecified")


def where(got: np.ndarray, want: np.ndarray, i: int) -> str:
    """What differs in output ``i``, for a failed check's message: its kind or shape, how
    many of its integers or booleans, its NaN and infinities' places, or its largest error."""
    head = f"output {i}, {want.dtype} of shape {tuple(want.shape)}"
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"{head}: the program returned {got.dtype} of shape {tuple(got.shape)}"
    if not np.issubdtype(want.dtype, np.floating):
        hint = INDEX_HINT if np.issubdtype(want.dtype, np.integer) else ""
        return f"{head}: {np.count_nonzero(got != want)} of {want.size} elements differ{hint}"
    misplaced = np.count_nonzero(_misplaced(got, want))
    if misplaced:
        return f"{head}: NaN or infinities differ at {misplaced} of {want.size} elements"
    return f"{head}: max relative error {difference(got, want):.3g}"


def scalar_note(scalars: list[dict]) -> str:
    """The outputs that were Python scalars, as a clause ("" where none were)."""
    if not scalars:
        return ""
    named = ", ".join(f"{s['output']} ({s['type']})" for s in scalars)
    return f"; Python scalar output(s) {named} compared as 0-d tensors (bool and int exactly)"


def outcome(verdict: dict) -> str:
    """How a passed check reads in a run's summary: within the tolerance, or (the float64
    referee) past it but no further from the float64 run than eager."""
    scalars = scalar_note(verdict.get("scalar_outputs", []))
    if "fp64" not in verdict:
        return f"matches eager (max rel. error {verdict['max_rel_error']:.2g}){scalars}"
    r = verdict["fp64"]
    return (f"differs from eager by {verdict['max_rel_error']:.2g} (> {verdict['rtol']:.2g}) "
            f"but is no further from the model run in float64 than eager ({r['program']:.2g} "
            f"against eager's {r['eager']:.2g}){scalars}")


def referee_note(verdict: dict) -> str:
    """What the float64 referee found, as a clause of a message ("" where it was not asked)."""
    if "fp64" not in verdict:
        return ""
    r = verdict["fp64"]
    if r is None:
        return "; the model cannot run in float64 to tell which of the two is closer"
    return (f"; against the model run in float64 the program's error is {r['program']:.3g} "
            f"and eager's own {r['eager']:.3g} (allowed: {r['multiplier']:g}x eager's "
            f"+ {verdict['rtol'] / 10:.2g})")
