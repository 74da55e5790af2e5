"""Loop bounds of ``scf.mlir``: the value of an index computed from constants and induction
variables (``index_value``, by ``INDEX_OPS``), each dimension's (lower, upper, step) and trip
count under given induction-variable values, and every iteration point of a stack of loops,
each loop's bounds evaluated under the outer ones' (what a triangular loop needs)."""

from __future__ import annotations

import itertools
from typing import Any

from torch_mlir import ir


def owner(value: ir.Value) -> ir.Operation | ir.Block:
    """The op that defines ``value`` (as an Operation, not an OpView), or its block."""
    defining = value.owner
    return defining if isinstance(defining, ir.Block) else defining.operation


def constant_index(value: ir.Value) -> int:
    defining = owner(value)
    if isinstance(defining, ir.Block) or defining.name != "arith.constant":
        raise ValueError(f"loop bound is not a constant: {value}")
    return ir.IntegerAttr(defining.attributes["value"]).value


# The index arithmetic a loop bound may be computed with from induction variables and
# constants (what torch-mlir writes for a triangular loop: ``%n = arith.subi %c7, %i``).
INDEX_OPS = {
    "arith.addi": lambda a, b: a + b, "arith.subi": lambda a, b: a - b,
    "arith.muli": lambda a, b: a * b, "arith.divui": lambda a, b: a // b,
    "arith.divsi": lambda a, b: abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1),
    "arith.floordivsi": lambda a, b: a // b, "arith.ceildivsi": lambda a, b: -(-a // b),
    "arith.remui": lambda a, b: a % b,
    "arith.remsi": lambda a, b: abs(a) % abs(b) * (1 if a >= 0 else -1),
    "arith.minsi": min, "arith.minui": min, "arith.maxsi": max, "arith.maxui": max,
    "arith.index_cast": lambda a: a, "arith.index_castui": lambda a: a,
}
# Iteration points pimbuild enumerates to count a nest whose bounds vary: the enclosing
# loops' iterations, times the nest's own where an inner loop's bounds depend on them.
MAX_POINTS = 1 << 16


def index_value(value: ir.Value, env: dict[Any, int]) -> int:
    """The value of an index computed from constants and the induction variables in ``env``
    (value -> its value) by ``INDEX_OPS``; ValueError for anything else (a bound loaded from
    memory, an induction variable not in ``env``)."""
    if value in env:
        return env[value]
    defining = owner(value)
    if isinstance(defining, ir.Block):
        raise ValueError(f"loop bound is not a constant: {value}")
    if defining.name == "arith.constant":
        return ir.IntegerAttr(defining.attributes["value"]).value
    if defining.name == "memref.dim":  # of a dimension the type fixes
        shaped, dim = ir.MemRefType(defining.operands[0].type), defining.operands[1]
        i = index_value(dim, env)
        if not shaped.is_dynamic_dim(i):
            return shaped.shape[i]
    if defining.name not in INDEX_OPS:
        raise ValueError(f"loop bound is computed by {defining.name}, which pimbuild cannot "
                         f"evaluate: {value}")
    return INDEX_OPS[defining.name](*(index_value(v, env) for v in defining.operands))


def bounds(op: ir.Operation, env: dict[Any, int] | None = None) -> list[tuple[int, int, int]]:
    """(lower, upper, step) of each dimension of an ``scf.parallel`` or ``scf.for`` (whose
    block also carries its ``iter_args``: one dimension), evaluated with the enclosing
    induction variables of ``env``."""
    n = len(op.regions[0].blocks[0].arguments) if op.name == "scf.parallel" else 1
    values = [index_value(v, env or {}) for v in list(op.operands)[:3 * n]]
    return list(zip(values[:n], values[n:2 * n], values[2 * n:], strict=True))


def trip_counts(op: ir.Operation, env: dict[Any, int] | None = None) -> list[int]:
    """Trip count of each dimension of an ``scf.parallel`` or ``scf.for``, under ``env``."""
    return [max(0, -(-(u - lb) // s)) for lb, u, s in bounds(op, env)]


def points(loops: list[ir.Operation], env: dict[Any, int] | None = None):
    """Every assignment of values to the induction variables of ``loops`` (outermost first;
    ``scf.for`` or ``scf.parallel``), each loop's bounds evaluated under the outer ones'."""
    env = env or {}
    if not loops:
        yield env
        return
    first, ivs = loops[0], list(loops[0].regions[0].blocks[0].arguments)
    ranges = [range(lb, ub, step) for lb, ub, step in bounds(first, env)]
    for values in itertools.product(*ranges):
        yield from points(loops[1:], {**env, **dict(zip(ivs, values, strict=False))})


def enclosing_loops(op: ir.Operation) -> list[ir.Operation]:
    """The ``scf.for`` and ``scf.parallel`` ops around ``op``, outermost first."""
    loops, parent = [], op.parent
    while parent is not None:
        if parent.name in ("scf.for", "scf.parallel"):
            loops.append(parent.operation)
        parent = parent.parent
    return loops[::-1]


def executions(loops: list[ir.Operation]) -> int:
    """How many times the body of the innermost of ``loops`` runs (each loop's bounds
    evaluated under the outer ones')."""
    return sum(1 for _ in itertools.islice(points(loops), MAX_POINTS + 1))
