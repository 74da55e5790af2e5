"""A small sparse MILP builder over HiGHS (``highspy``): named variable blocks, rows as
``{column: coefficient}``, one ``solve``. The GPU planners and the PIM ``joint`` policy state
their models with it."""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import highspy
import numpy as np

INF = highspy.kHighsInf
# Models state times in microseconds: HiGHS's tolerances are absolute (1e-7), and kernels
# of a few microseconds stated in seconds would sit at the tolerance.
US = 1e6
# Statuses of a search that ran to its end (with a cutoff: nothing below it, or the optimum)
SEARCHED = (highspy.HighsModelStatus.kOptimal, highspy.HighsModelStatus.kInfeasible,
            highspy.HighsModelStatus.kObjectiveBound)


def silent_highs() -> highspy.Highs:
    """A HiGHS instance that prints nothing. Its constructor writes a banner straight to file
    descriptor 1 the first time in a process, past ``output_flag``; that write goes to
    /dev/null here, so a build's console and a piped log stay clean."""
    sys.stdout.flush()
    saved = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)
    h.setOptionValue("output_flag", False)
    return h


@dataclass
class Model:
    lower: list[float] = field(default_factory=list)
    upper: list[float] = field(default_factory=list)
    cost: list[float] = field(default_factory=list)
    integer: list[int] = field(default_factory=list)
    rows: list[tuple[float, float, dict[int, float]]] = field(default_factory=list)

    def var(self, lo: float = 0.0, hi: float = INF, cost: float = 0.0,
            binary: bool = False, integer: bool = False) -> int:
        """A column in ``[lo, hi]``; ``binary`` or ``integer``: integral (a binary one is
        given its 0/1 bounds by the caller)."""
        self.lower.append(lo)
        self.upper.append(hi)
        self.cost.append(cost)
        if binary or integer:
            self.integer.append(len(self.cost) - 1)
        return len(self.cost) - 1

    def row(self, terms: list[tuple[int, float]] | dict[int, float], lo: float = -INF,
            hi: float = INF) -> None:
        """``lo <= sum(coef * var) <= hi``; a column given twice has its coefficients summed."""
        pairs = terms.items() if isinstance(terms, dict) else terms
        summed: dict[int, float] = {}
        for col, coef in pairs:
            summed[col] = summed.get(col, 0.0) + coef
        self.rows.append((lo, hi, summed))

    def solve(self, time_limit_s: float = 60.0, gap: float = 0.0, incumbent: bool = False,
              start: dict[int, float] | None = None, cutoff: float | None = None,
              options: dict[str, Any] | None = None
              ) -> tuple[np.ndarray | None, float, float, dict[str, Any]]:
        """(column values, objective, seconds, {status, bound}): optimal, or within
        relative ``gap`` of the best bound. When HiGHS stops otherwise (its time limit), the
        best placement found is returned with its proven gap if ``incumbent``, else this
        raises RuntimeError. ``start``: values of some columns (every integer one) of a
        feasible solution, which HiGHS completes and starts from (a MIP start): what it
        returns is never worse; stopped before it completed the start (a time limit of
        milliseconds), with ``incumbent`` it returns ``(None, inf, seconds, {status,
        bound})`` and the start is the best placement known. ``cutoff``: only solutions
        below it are of interest (HiGHS's ``objective_bound``): when the model has none,
        this returns ``(None, inf, seconds, {"status": "Cut off", "bound": cutoff})``;
        stopped before it found one or proved there is none, the same with HiGHS's status
        and bound if ``incumbent``, else it raises. ``options``: more HiGHS options."""
        h = silent_highs()
        h.setOptionValue("time_limit", float(time_limit_s))
        h.setOptionValue("mip_rel_gap", float(gap))
        # HiGHS accepts MIP solutions within 1e-6 of a row but checks its optimum against the
        # primal tolerance (1e-7) and ends with "Solve error" when it misses: seen on a
        # period's model (tests/test_milp.py). One tolerance for both.
        h.setOptionValue("mip_feasibility_tolerance",
                         h.getOptionValue("primal_feasibility_tolerance")[1])
        if cutoff is not None:
            h.setOptionValue("objective_bound", float(cutoff))
        for name, value in (options or {}).items():
            h.setOptionValue(name, value)
        n = len(self.cost)
        h.addCols(n, np.array(self.cost), np.array(self.lower), np.array(self.upper), 0,
                  np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0))
        if self.integer:
            idx = np.array(self.integer, dtype=np.int32)
            h.changeColsIntegrality(len(idx), idx,
                                    np.full(len(idx), highspy.HighsVarType.kInteger))
        starts, index, value = [], [], []
        for _, _, terms in self.rows:
            starts.append(len(index))
            index += list(terms)
            value += list(terms.values())
        h.addRows(len(self.rows), np.array([r[0] for r in self.rows]),
                  np.array([r[1] for r in self.rows]), len(index),
                  np.array(starts, dtype=np.int32), np.array(index, dtype=np.int32),
                  np.array(value, dtype=float))
        if start:
            h.setSolution(len(start), np.array(list(start), dtype=np.int32),
                          np.array(list(start.values()), dtype=float))
        began = time.perf_counter()
        h.run()
        seconds = time.perf_counter() - began
        status, info = h.getModelStatus(), h.getInfo()
        found = info.primal_solution_status == 2  # kSolutionStatusFeasible
        if cutoff is not None and (not found or info.objective_function_value >= cutoff):
            if status in SEARCHED:  # nothing below the cutoff, proven
                return None, INF, seconds, {"status": "Cut off", "bound": cutoff}
            if incumbent:  # stopped before it could tell, nothing better found
                return None, INF, seconds, {"status": h.modelStatusToString(status),
                                            "bound": info.mip_dual_bound}
            raise RuntimeError(f"HiGHS ended with {h.modelStatusToString(status)}")
        if status != highspy.HighsModelStatus.kOptimal and not (incumbent and found):
            if incumbent and start:  # stopped before it even completed the start: the
                return None, INF, seconds, {  # caller keeps its start
                    "status": h.modelStatusToString(status), "bound": info.mip_dual_bound}
            raise RuntimeError(f"HiGHS ended with {h.modelStatusToString(status)}")
        objective = info.objective_function_value
        bound = info.mip_dual_bound if self.integer else objective
        report = {"status": h.modelStatusToString(status), "bound": bound}
        return np.array(h.getSolution().col_value), objective, seconds, report
