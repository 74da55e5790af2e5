"""Invariants of the PIM target's timing model and the copy models (docs/design.md §6)."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from pimbuild import copymodels, hybrid, policies, targets
from pimbuild.copymodels import upper_bound
from pimbuild.nests import Nest
from pimbuild.policies import PolicyContext, PolicyParams
from pimbuild.policies.torchpim import c1_bound_s, rule_params
from tests.conftest import make_cfg

MODEL = targets.from_config(make_cfg(Path("unused-store"), []))  # conf/pim/default.yaml
POLICY = PolicyParams(name="torchpim", theta_ratio=0.12, theta_gbps=2.0, sigma=0.4, i_min=1.0)


def context(nests: list[Nest], policy: PolicyParams = POLICY, target=MODEL,
            copy_model: str = "upper_bound", forward_s: float | None = None) -> PolicyContext:
    forward = sum(n.t_cpu_s for n in nests) if forward_s is None else forward_s
    return PolicyContext(nests=nests, forward_s=forward, outputs={"out"}, b_cpu_gbps=16.0,
                         policy=policy, target=target, copy_model=copy_model)


RULE = rule_params(context([]))


def nest(ident: int = 0, n_iter: int = 4096, inner: int = 1, mix=(2, 1, 1, 0),
         reads=None, writes=None, t_cpu_s: float = 1e-3, bw: float | None = 5.0,
         store: float | None = 0.0, module: str = "", node: str = "op") -> Nest:
    loads, stores, arith, math = mix
    return Nest(id=ident, source_op="aten.x", source_module=module, source_node=node,
                n_iter=n_iter, n_total=n_iter * inner, invocations=1, t_cpu_s=t_cpu_s,
                bw_read_gbps=bw, store_bound=store,
                reads=reads if reads is not None else {"arg0": 4 * n_iter * inner},
                writes=writes if writes is not None else {"arg1": 4 * n_iter},
                op_mix={"loads": loads * inner, "stores": stores, "arith": arith * inner,
                        "math": math * inner, "calls": 0})


SHAPE_ARGS = [dict(n_iter=1), dict(n_iter=64, inner=4096), dict(n_iter=1 << 20),
              dict(n_iter=4096, mix=(1, 1, 2, 1)), dict(n_iter=100, inner=7, mix=(0, 1, 0, 0))]


@pytest.mark.parametrize("cores", [1, 8, 32, 128, 1024])
@pytest.mark.parametrize("args", SHAPE_ARGS)
def test_never_below_c1_lower_bound(args: dict, cores: int) -> None:
    n = nest(**args)
    m = dataclasses.replace(MODEL, n_core=cores)
    r = dataclasses.replace(RULE, n_core=cores)
    assert m.unit_time(n) >= c1_bound_s(n.n_total, n.invocations, r)


@pytest.mark.parametrize("cores", [8, 128])
@pytest.mark.parametrize("args", SHAPE_ARGS)
def test_monotone_in_work(args: dict, cores: int) -> None:
    m = dataclasses.replace(MODEL, n_core=cores)
    base = m.unit_time(nest(**args))
    inner = args.get("inner", 1)
    more_parallel = nest(**{**args, "n_iter": 2 * args["n_iter"]})
    more_inner = nest(**{**args, "inner": 2 * inner})
    assert m.unit_time(more_parallel) > base
    assert m.unit_time(more_inner) > base


def test_small_regions_slow_down_with_cores_large_ones_speed_up() -> None:
    small, large = nest(n_iter=4096), nest(n_iter=1 << 22)
    at = {c: dataclasses.replace(MODEL, n_core=c) for c in (64, 128)}
    assert at[128].unit_time(small) > at[64].unit_time(small)
    assert at[128].unit_time(large) < at[64].unit_time(large)


def chain() -> list[Nest]:
    """x -> a -> b (in place) -> out, with a temporary and a re-read input."""
    return [nest(0, reads={"x": 4096}, writes={"a": 4096}),
            nest(1, reads={"a": 4096}, writes={"a": 4096}),
            nest(2, reads={"a": 4096, "x": 4096}, writes={"t": 4096}),
            nest(3, reads={"t": 4096}, writes={"out": 4096}),
            nest(4, reads={"out": 4096}, writes={"out": 4096})]


def test_resident_never_moves_more_than_upper_bound() -> None:
    nests = chain()
    for k in range(len(nests) + 1):
        for pim in itertools.combinations(range(len(nests)), k):
            ub = sum(upper_bound(nests, set(pim), {"out"}))
            res = sum(copymodels.resident(nests, set(pim), {"out"}))
            assert res <= ub, pim


def test_upper_bound_counts_each_buffer_once_per_direction_and_segment() -> None:
    nests = chain()
    fetch, flush = upper_bound(nests, {0, 1, 2}, set())  # one segment
    assert fetch == 4096  # x only: a is produced inside the segment
    assert flush == 2 * 4096  # a and t
    fetch, flush = upper_bound(nests, {0, 2}, set())  # two segments
    assert fetch == 4096 + 2 * 4096
    assert copymodels.segments(nests, {0, 2}) == [[nests[0]], [nests[2]]]


def test_nothing_offloaded_has_speedup_one() -> None:
    b = hybrid.hybrid(chain(), set(), 6e-3, MODEL, "upper_bound", {"out"})
    assert b.speedup == 1.0
    assert b.n_region == 0 and b.t_copy_s == 0 and b.t_device_s == 0


def test_transitions_are_two_per_segment() -> None:
    b = hybrid.hybrid(chain(), {0, 1, 3}, 6e-3, MODEL, "upper_bound", {"out"})
    assert b.n_region == 4
    assert b.t_switch_s == pytest.approx(4 * MODEL.t_sw_us * 1e-6)


@pytest.mark.parametrize("copy_model", ["upper_bound", "resident"])
def test_oracle_beats_every_policy(copy_model: str) -> None:
    nests = [dataclasses.replace(n, t_cpu_s=t, bw_read_gbps=bw)
             for n, t, bw in zip(chain(), [1e-3, 2e-5, 5e-3, 1e-6, 3e-3],
                                 [9.0, 0.1, 3.0, 8.0, 0.5], strict=True)]
    forward = sum(n.t_cpu_s for n in nests)
    cost = {}
    ctx = context(nests, copy_model=copy_model, forward_s=forward)
    for policy in policies.POLICIES.names():
        pim = policies.place(policy, ctx).offloaded(ctx)
        cost[policy] = hybrid.hybrid(nests, pim, forward, MODEL, copy_model,
                                     {"out"}).t_hybrid_s
    assert all(cost["oracle"] <= c + 1e-15 for c in cost.values())


@pytest.mark.parametrize("cores", [8, 128, 1024])
@pytest.mark.parametrize("args", SHAPE_ARGS)
def test_c1_model_charges_the_fixed_costs_of_the_target(args: dict, cores: int) -> None:
    """With policy.c1=model, a nest passing C1 has T_cpu above every fixed cost the model
    charges it offloaded alone: two switches and, per invocation, launch and sync."""
    from pimbuild.policies.torchpim import c1_threshold_s

    n = dataclasses.replace(nest(**args), invocations=3)
    m = dataclasses.replace(MODEL, n_core=cores)
    r = rule_params(context([n], policy=dataclasses.replace(POLICY, c1="model"), target=m))
    idle = dataclasses.replace(n, n_total=0, reads={}, writes={},
                               op_mix=dict.fromkeys(n.op_mix, 0))
    fixed = m.unit_time(idle) + m.switch_time(2)
    threshold = c1_threshold_s(n.n_total, n.invocations, n.n_iter, r)
    assert threshold == pytest.approx(fixed + c1_bound_s(n.n_total, n.invocations, r),
                                      rel=1e-12)
    paper = dataclasses.replace(r, c1="paper")
    assert c1_threshold_s(n.n_total, n.invocations, n.n_iter, paper) == pytest.approx(
        r.t_ctx_s + c1_bound_s(n.n_total, n.invocations, r), rel=1e-12)
