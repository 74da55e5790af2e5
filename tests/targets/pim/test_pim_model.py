"""Invariants of the PIM target's timing model and the copy models (docs/design.md §6)."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import pytest

from pimbuild import targets
from pimbuild.targets.offload import copymodels, hybrid, policies
from pimbuild.targets.offload.copymodels import COPY_MODELS, UPPER_BOUND, CopyModel
from pimbuild.targets.offload.nests import Nest
from pimbuild.targets.offload.policies import PolicyContext, PolicyParams
from pimbuild.targets.offload.policies.torchpim import c1_bound_s, rule_params
from tests.conftest import make_cfg

MODEL = targets.from_config(make_cfg(Path("unused-store"), []))  # pimbuild/conf/pim/default.yaml
FITTED = targets.from_config(make_cfg(Path("unused-store"), ["pim=fitted_paper"]))
POLICY = PolicyParams(name="torchpim", theta_ratio=0.12, theta_gbps=2.0, sigma=0.4, i_min=1.0)


def context(nests: list[Nest], policy: PolicyParams = POLICY, target=MODEL,
            copy_model: str = "upper_bound", forward_s: float | None = None) -> PolicyContext:
    forward = sum(n.t_cpu_s for n in nests) if forward_s is None else forward_s
    return PolicyContext(nests=nests, forward_s=forward, outputs={"out"}, b_cpu_gbps=16.0,
                         policy=policy, target=target, copy_model=CopyModel(copy_model))


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


@pytest.mark.parametrize("model", [MODEL, FITTED, dataclasses.replace(FITTED, sync_all=True)],
                         ids=["default", "fitted", "fitted-sync-all"])
@pytest.mark.parametrize("cores", [1, 8, 32, 128, 1024])
@pytest.mark.parametrize("args", SHAPE_ARGS)
def test_never_below_c1_lower_bound(args: dict, cores: int, model) -> None:
    n = nest(**args)
    m = dataclasses.replace(model, n_core=cores)
    r = rule_params(context([n], target=m))
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
            ub = sum(COPY_MODELS.get("upper_bound")(nests, set(pim), {"out"}))
            res = sum(COPY_MODELS.get("resident")(nests, set(pim), {"out"}))
            assert res <= ub, pim


def test_upper_bound_counts_each_buffer_once_per_direction_and_segment() -> None:
    nests = chain()
    fetch, flush = COPY_MODELS.get("upper_bound")(nests, {0, 1, 2}, set())  # one segment
    assert fetch == 4096  # x only: a is produced inside the segment
    assert flush == 2 * 4096  # a and t
    fetch, flush = COPY_MODELS.get("upper_bound")(nests, {0, 2}, set())  # two segments
    assert fetch == 4096 + 2 * 4096
    assert copymodels.segments(nests, {0, 2}) == [[nests[0]], [nests[2]]]


def test_nothing_offloaded_has_speedup_one() -> None:
    b = hybrid.hybrid(chain(), set(), 6e-3, MODEL, UPPER_BOUND, {"out"})
    assert b.speedup == 1.0
    assert b.n_region == 0 and b.t_copy_s == 0 and b.t_device_s == 0


def test_transitions_are_two_per_segment() -> None:
    b = hybrid.hybrid(chain(), {0, 1, 3}, 6e-3, MODEL, UPPER_BOUND, {"out"})
    assert b.n_region == 4
    assert b.t_switch_s == pytest.approx(4 * MODEL.t_sw_us * 1e-6)


def test_a_segment_stays_in_its_loop_and_counts_each_run() -> None:
    """Nests 0-1 run in a loop of 7 iterations, 2-3 after it: offloading all four makes two
    segments (not one across the loop's end), the first entered and left 7 times."""
    looped = [dataclasses.replace(n, scope="scf.for#0", invocations=7) for n in chain()[:2]]
    nests = [*looped, *chain()[2:4]]
    assert [[n.id for n in s] for s in copymodels.segments(nests, {0, 1, 2, 3})] == [[0, 1],
                                                                                    [2, 3]]
    b = hybrid.hybrid(nests, {0, 1, 2, 3}, 6e-3, MODEL, UPPER_BOUND, {"out"})
    assert b.n_region == 2 * 7 + 2


def test_a_nest_of_varying_bounds_costs_each_invocation() -> None:
    """T_pim of a triangular nest: the sum of its invocations' own times, not the mean's
    times the count (PIM cores idle in the short ones)."""
    per = tuple((n * 8, n * 8) for n in range(7, 0, -1))
    varying = dataclasses.replace(nest(n_iter=32, inner=1), invocations=7, per_invocation=per)
    expected = sum(MODEL.invocation_time(varying, a, b) for a, b in per)
    assert MODEL.unit_time(varying) == pytest.approx(expected)
    mean = dataclasses.replace(varying, per_invocation=())
    assert MODEL.unit_time(varying) != pytest.approx(MODEL.unit_time(mean))


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
        cost[policy] = hybrid.hybrid(nests, pim, forward, MODEL, ctx.copy_model,
                                     {"out"}).t_hybrid_s
    assert all(cost["oracle"] <= c + 1e-15 for c in cost.values())


@pytest.mark.parametrize("model", [MODEL, dataclasses.replace(FITTED, sync_ns_per_core=20.0,
                                                                sync_all=True)],
                         ids=["default", "fitted-sync-all"])
@pytest.mark.parametrize("cores", [8, 128, 1024])
@pytest.mark.parametrize("args", SHAPE_ARGS)
def test_c1_model_charges_the_fixed_costs_of_the_target(args: dict, cores: int, model) -> None:
    """With policy.c1=model, a nest passing C1 has T_cpu above every fixed cost the model
    charges it offloaded alone: two switches and, per invocation, launch and sync."""
    from pimbuild.targets.offload.policies.torchpim import c1_threshold_s

    n = dataclasses.replace(nest(**args), invocations=3)
    m = dataclasses.replace(model, n_core=cores)
    r = rule_params(context([n], policy=dataclasses.replace(POLICY, c1="model"), target=m))
    idle = dataclasses.replace(n, n_total=0, reads={}, writes={},
                               op_mix=dict.fromkeys(n.op_mix, 0))
    fixed = m.unit_time(idle) + m.switch_time(2)
    threshold = c1_threshold_s(n.n_total, n.invocations, n.n_iter, r)
    assert threshold == pytest.approx(fixed + c1_bound_s(n.n_total, n.invocations, r),
                                      rel=1e-12)
    paper = dataclasses.replace(r, c1="paper")
    assert c1_threshold_s(n.n_total, n.invocations, n.n_iter, paper) == pytest.approx(
        r.costs.t_ctx_s + c1_bound_s(n.n_total, n.invocations, paper), rel=1e-12)


def test_shared_limits_at_their_defaults_are_the_per_core_model() -> None:
    """pim=default (mlp 1, no B_stack, no overlap, 1 lane, busy-core sync) is the model
    the paper's Table 2 describes, term by term."""
    n = nest(n_iter=1 << 16, inner=4, mix=(2, 1, 3, 1))
    m = dataclasses.replace(MODEL, n_core=64)
    cycles = 2 * 4 + 1 + 3 * 4 + 1 * 4 * m.c_math + 4  # loads, stores, arith, math, loop
    compute = (1 << 16) / 64 * cycles / 1e9
    memory = n.moved_bytes / (64 * 64 / 22.5 * 1e9)
    overhead = 1e-6 + 64 * 20e-9
    assert m.unit_time(n) == pytest.approx(compute + memory + overhead, rel=1e-12)


def test_stack_bandwidth_caps_memory_time_and_overlap_hides_the_shorter_term() -> None:
    n = nest(n_iter=1 << 20, mix=(0, 0, 0, 0), reads={"a": 1 << 30}, writes={})
    flat = dataclasses.replace(MODEL, launch_us=0.0, sync_ns_per_core=0.0, c_loop=0.0,
                               stack_bw_gbps=100.0)
    t = {c: flat.with_units(c).unit_time(n) for c in (16, 64, 1024)}
    assert t[64] == pytest.approx((1 << 30) / 100e9) == pytest.approx(t[1024])  # saturated
    assert t[16] == pytest.approx((1 << 30) / (16 * 64 / 22.5 * 1e9))  # below the ceiling
    mixed = nest(n_iter=1 << 20, mix=(1, 1, 4, 0))
    none = dataclasses.replace(MODEL, launch_us=0.0, sync_ns_per_core=0.0)
    half = dataclasses.replace(none, overlap=0.5)
    full = dataclasses.replace(none, overlap=1.0)
    cycles = (1 + 1 + 4 + 1) * (1 << 20) / 128 / 1e9
    mem = mixed.moved_bytes / (128 * 64 / 22.5 * 1e9)
    assert none.unit_time(mixed) == pytest.approx(cycles + mem)
    assert half.unit_time(mixed) == pytest.approx(cycles + mem - 0.5 * min(cycles, mem))
    assert full.unit_time(mixed) == pytest.approx(max(cycles, mem))


def test_lanes_divide_instructions_not_transcendentals_and_sync_all_counts_idle_cores() -> None:
    n = nest(n_iter=64, inner=1024, mix=(1, 1, 1, 1), reads={}, writes={})
    base = dataclasses.replace(MODEL, launch_us=0.0, sync_ns_per_core=0.0)
    wide = dataclasses.replace(base, lanes=8.0)
    math_s = 64 / 64 * 1024 * base.c_math / 1e9
    assert wide.unit_time(n) - math_s == pytest.approx((base.unit_time(n) - math_s) / 8)
    synced = dataclasses.replace(MODEL, sync_ns_per_core=20.0)
    busy, every = synced.with_units(128), dataclasses.replace(synced, sync_all=True)
    assert every.unit_time(n) - busy.unit_time(n) == pytest.approx((128 - 64) * 20e-9)
