"""The HiGHS model builder (``pimbuild.milp``): a cutoff prunes a model that cannot beat it."""

from __future__ import annotations

import math

from pimbuild.milp import Model


def split(weights: list[int]) -> Model:
    """Two bins, the heavier one's load minimised: a partition problem."""
    m = Model()
    c = m.var(cost=1.0)
    xs = [m.var(0, 1, binary=True) for _ in weights]
    m.row([(c, 1.0)] + [(x, -w) for x, w in zip(xs, weights, strict=True)], lo=0)
    m.row([(c, 1.0)] + [(x, w) for x, w in zip(xs, weights, strict=True)], lo=sum(weights))
    return m


def test_a_cutoff_below_the_optimum_cuts_the_model_off_and_above_it_changes_nothing() -> None:
    m = split([3, 5, 7, 8, 9, 11])  # 43: 21 + 22 at best
    values, objective, _, status = m.solve()
    assert objective == 22 and status["status"] == "Optimal"
    values, objective, _, status = m.solve(cutoff=22)  # nothing below 22
    assert values is None and math.isinf(objective)
    assert status == {"status": "Cut off", "bound": 22}
    values, objective, _, status = m.solve(cutoff=23)
    assert objective == 22 and values is not None and status["status"] == "Optimal"
    values, objective, _, _ = m.solve(cutoff=30, options={"mip_allow_restart": False})
    assert objective == 22
