"""The decision rule: which condition decides, with the numbers (docs/design.md §7)."""

from __future__ import annotations

import dataclasses
import json

from pimbuild.targets.offload import policies
from pimbuild.targets.offload.policies import Decision
from tests.targets.pim.test_pim_model import POLICY, RULE, context, nest


def _place(name: str, nests, policy=POLICY) -> list[Decision]:
    return policies.place(name, context(nests, policy)).decisions


def _one(n) -> Decision:
    (d,) = _place("torchpim", [n])
    return d


def test_c1_rejects_too_little_work() -> None:
    d = _one(nest(n_iter=1 << 20, t_cpu_s=1e-6))
    assert (d.target, d.decided_by) == ("host", "C1")
    # policy.c1=model (the default): two switches, launch and the sync of 128 cores
    c = RULE.costs
    fixed = 2 * c.switch_s + c.launch_s + 128 * c.sync_s_per_core
    assert d.quantities["c1_threshold_s"] == fixed + (1 << 20) / (128 * 1e9)
    (paper,) = _place("torchpim", [nest(n_iter=1 << 20, t_cpu_s=1e-6)],
                      dataclasses.replace(POLICY, c1="paper"))
    assert paper.quantities["c1_threshold_s"] == RULE.costs.t_ctx_s + (1 << 20) / (128 * 1e9)


def test_c2_rejects_too_few_parallel_iterations() -> None:
    d = _one(nest(n_iter=64, inner=4096, t_cpu_s=1e-3))
    assert (d.target, d.decided_by) == ("host", "C2")


def test_c3_accepts_high_read_bandwidth() -> None:
    d = _one(nest(bw=RULE.theta_gbps * 1.01, store=0.0))
    assert (d.target, d.decided_by) == ("pim", "C3")


def test_c4_accepts_store_bound_when_c3_fails() -> None:
    """policy.c4=read_later (the default) when a later nest reads what it writes, and
    c4=paper whatever reads it."""
    fill = nest(0, bw=0.01, store=RULE.sigma + 0.01, reads={}, writes={"tmp": 4096})
    reader = nest(1, bw=0.0, store=0.0, reads={"tmp": 4096}, writes={"out": 4096})
    d = _place("torchpim", [fill, reader])[0]
    assert (d.target, d.decided_by) == ("pim", "C4")
    alone = dataclasses.replace(fill, writes={"out": 4096})
    assert (_one(alone).target, _one(alone).decided_by) == ("host", "C4")
    assert "no later nest reads what it writes" in _one(alone).reason
    (paper,) = _place("torchpim", [alone], dataclasses.replace(POLICY, c4="paper"))
    assert (paper.target, paper.decided_by) == ("pim", "C4")


def test_c5_accepts_compute_bound_nests_when_switched_on() -> None:
    """C5 (policy.i_compute; off by default, the paper's rule): a nest neither memory- nor
    store-bound goes to PIM when T_cpu covers C1's threshold with I_compute instructions per
    element, and stays on the host below it; C1 and C2 still reject first."""
    slow = nest(n_iter=1 << 20, bw=0.0, store=0.0, t_cpu_s=1e-3)
    assert (_one(slow).target, _one(slow).decided_by) == ("host", "C3/C4")
    on = dataclasses.replace(POLICY, i_compute=64.0)
    (d,) = _place("torchpim", [slow], on)
    c = RULE.costs
    fixed = 2 * c.switch_s + c.launch_s + 128 * c.sync_s_per_core
    assert d.quantities["c5_threshold_s"] == fixed + 64 * (1 << 20) / (128 * 1e9)
    assert (d.target, d.decided_by) == ("pim", "C5")
    fast = dataclasses.replace(slow, t_cpu_s=0.9 * d.quantities["c5_threshold_s"])
    (d,) = _place("torchpim", [fast], on)
    assert (d.target, d.decided_by) == ("host", "C3/C4") and "C5" in d.reason
    (d,) = _place("torchpim", [nest(n_iter=64, inner=4096, t_cpu_s=1.0)], on)
    assert (d.target, d.decided_by) == ("host", "C2")


def test_operator_level_c4_asks_for_a_reader_in_another_operator() -> None:
    store = RULE.sigma + 0.3
    first = nest(0, node="norm", bw=0.0, store=store, reads={}, writes={"tmp": 4096})
    second = nest(1, node="norm", bw=0.0, store=store, reads={"tmp": 4096},
                  writes={"y": 4096})
    alone = _place("operator", [first, second])  # tmp is read inside the operator only
    assert {d.target for d in alone} == {"host"}
    user = nest(2, node="proj", bw=0.0, store=0.0, reads={"y": 4096}, writes={"out": 4096})
    fed = _place("operator", [first, second, user])
    assert [d.target for d in fed[:2]] == ["pim", "pim"]


def test_read_later_follows_program_order() -> None:
    from pimbuild.targets.offload.policies.torchpim import read_later

    a = nest(0, reads={"in": 4}, writes={"x": 4})
    b = nest(1, reads={"x": 4}, writes={"y": 4})
    c = nest(2, reads={"in": 4}, writes={"z": 4})  # z: nobody reads it
    d = nest(3, reads={"y": 4}, writes={"out": 4})
    assert read_later([a, b, c, d]) == {0, 1}
    assert read_later([d, b, a, c]) == set()  # readers before writers do not count


def test_stage_two_rejects_compute_bound() -> None:
    d = _one(nest(bw=RULE.theta_gbps * 0.99, store=RULE.sigma))
    assert (d.target, d.decided_by) == ("host", "C3/C4")


def test_no_counters_means_no_offload() -> None:
    d = _one(nest(bw=None, store=None))
    assert (d.target, d.decided_by) == ("host", "no-counters")


def test_operator_policy_gives_every_nest_of_an_operator_one_decision() -> None:
    nests = [nest(0, node="softmax", bw=9.0, t_cpu_s=1e-3),
             nest(1, node="softmax", bw=0.0, t_cpu_s=1e-4),
             nest(2, node="relu", bw=0.0, t_cpu_s=1e-3)]
    per_nest = {d.id: d.target for d in _place("torchpim", nests)}
    per_op = {d.id: d.target for d in _place("operator", nests)}
    assert per_nest == {0: "pim", 1: "host", 2: "host"}
    assert per_op == {0: "pim", 1: "pim", 2: "host"}


def test_absolute_theta_overrides_ratio() -> None:
    strict = dataclasses.replace(POLICY, theta_gbps=100.0)
    (d,) = _place("torchpim", [nest(bw=50.0)], strict)
    assert d.target == "host" and d.quantities["theta_gbps"] == 100.0


def test_cpu_policy_offloads_nothing() -> None:
    assert {d.target for d in _place("cpu", [nest(0), nest(1)])} == {"host"}


def test_theta_zero_is_an_absolute_theta() -> None:
    zero = dataclasses.replace(POLICY, theta_gbps=0.0)
    assert zero.theta(16.0) == 0.0
    assert dataclasses.replace(POLICY, theta_gbps=None).theta(16.0) == 0.12 * 16.0


def _borderline(spread: float, **kw) -> Decision:
    return _one(dataclasses.replace(nest(**kw), t_spread=spread))


def test_decision_near_c1_is_borderline_only_within_the_spread() -> None:
    c = RULE.costs
    threshold = 2 * c.switch_s + c.launch_s + 128 * c.sync_s_per_core + 4096 / (128 * 1e9)
    below = threshold * 0.95
    assert not _borderline(0.0, t_cpu_s=below).borderline
    assert not _borderline(0.02, t_cpu_s=below).borderline  # 2% cannot reach 5% away
    d = _borderline(0.1, t_cpu_s=below)
    assert (d.target, d.decided_by, d.borderline) == ("host", "C1", True)


def test_bandwidth_near_theta_is_borderline_unless_c4_holds_either_way() -> None:
    # BW_read = n_rd * L / T_cpu: a slower run reads below theta, and then C4 decides.
    near = dict(bw=RULE.theta_gbps * 1.05, spread=0.1)
    assert _borderline(near["spread"], bw=near["bw"], store=0.0).borderline
    store_bound = dataclasses.replace(nest(bw=near["bw"], store=RULE.sigma + 0.1),
                                      t_spread=near["spread"])
    (c4_holds,) = _place("torchpim", [store_bound], dataclasses.replace(POLICY, c4="paper"))
    assert (c4_holds.target, c4_holds.decided_by, c4_holds.borderline) == ("pim", "C3", False)
    (no_reader,) = _place("torchpim", [store_bound])  # c4=read_later: C4 cannot hold here
    assert (no_reader.target, no_reader.borderline) == ("pim", True)
    far = _borderline(0.1, bw=RULE.theta_gbps * 2, store=0.0)
    assert not far.borderline


def test_decisions_json_lists_the_borderline_nests(tmp_path) -> None:
    ctx = context([dataclasses.replace(nest(ident=0, bw=RULE.theta_gbps * 1.05), t_spread=0.1),
                   nest(ident=1, bw=RULE.theta_gbps * 3)])
    path = tmp_path / "decisions.json"
    policies.write(path, "torchpim", policies.place("torchpim", ctx), ctx)
    assert json.loads(path.read_text())["borderline"] == [0]
