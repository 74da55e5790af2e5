"""A planner's objective is found with the planner, wherever it lives: the built-in two's, and
a planner of one's own whose module defines ``objective(ctx)`` (``decide.objective``)."""

from __future__ import annotations

from pimbuild.targets.gpus import decide
from pimbuild.targets.gpus.costmodel import cost
from pimbuild.targets.gpus.costmodel.ddg import Graph, Kernel
from pimbuild.targets.gpus.planners import PLANNERS, PlanContext


def place(ctx: PlanContext):  # a planner of this module's, registered below
    raise AssertionError("not called")


def objective(ctx: PlanContext):
    return lambda p: float(sum(p))  # this module's: the number of kernels off device 0


def context() -> PlanContext:
    a = Kernel(0, "a", "elementwise", 0, {"in": 4}, {"x": 1000})
    b = Kernel(1, "b", "elementwise", 0, {"x": 1000}, {"y": 8})
    g = Graph((a, b), {"in": 4, "x": 1000, "y": 8}, {"x": 0, "y": 1}, {"in": (0,), "x": (1,)},
              ("in",), ("y",))
    return PlanContext(g, [[1.0, 2.0], [3.0, 1.0]], cost.Link(10.0, 1.0), 2, 0.0)


def test_the_objective_comes_with_the_planner() -> None:
    ctx = context()
    for place_ in ([0, 0], [0, 1], [1, 0]):
        assert decide.objective("throughput", ctx)(place_) == cost.cycle_time(
            ctx.graph, place_, ctx.times, ctx.link, ctx.n_dev, ctx.comm_on_device)
        assert decide.objective("latency", ctx)(place_) == cost.critical_path(
            ctx.graph, place_, ctx.times, ctx.link, ctx.n_dev)
    PLANNERS.register("mine", place)
    try:
        assert decide.objective("mine", ctx)([1, 1]) == 2.0
        assert decide.objective(f"{__name__}:place", ctx)([0, 1]) == 1.0
        PLANNERS.register("none", len)  # a builtin's module has no objective
        assert decide.objective("none", ctx) is None
    finally:
        PLANNERS.unregister("mine")
        PLANNERS.unregister("none")
