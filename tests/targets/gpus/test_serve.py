"""The serving simulator against what it must reproduce (docs/design.md §10, issue 12)."""

from __future__ import annotations

import random

import pytest

from pimbuild.targets.gpus.costmodel import cost
from pimbuild.targets.gpus.costmodel.cost import Link
from pimbuild.targets.gpus.costmodel.ddg import Graph, Kernel
from pimbuild.targets.gpus.systems.engine import Server
from tests.targets.gpus.test_gpus import random_graph

LINK = Link(200, 5.0)
FREE = Link(1e12, 0.0)  # transfers that cost nothing


def _case(seed: int, n: int = 8, carried: bool = False):
    rng = random.Random(seed)
    g = random_graph(rng, n, carried)
    times = [[rng.uniform(1e-5, 1e-4) for _ in range(2)] for _ in range(n)]
    place = [rng.randrange(2) for _ in range(n)]
    return g, times, place


@pytest.mark.parametrize("seed", range(6))
def test_one_request_takes_the_critical_path(seed: int) -> None:
    g, times, place = _case(seed)
    server = Server(g, place, times, LINK, 2, link_contention=False)
    result = server.run([0.0])
    assert result.latencies[0] == pytest.approx(
        cost.critical_path(g, place, times, LINK, 2), rel=1e-12)


def test_one_device_serves_the_sum_of_its_kernels_per_layer() -> None:
    g, times, _ = _case(3, carried=True)
    result = Server(g, [0] * len(g.kernels), times, LINK, 2, layers=4).run([0.0])
    assert result.latencies[0] == pytest.approx(4 * sum(t[0] for t in times), rel=1e-12)


def test_pipelined_requests_reach_the_cycle_time_bound_without_transfer_cost() -> None:
    g, times, place = _case(5, n=10, carried=True)
    cycle = cost.cycle_time(g, place, times, FREE, 2, 0.0)
    n = 300
    result = Server(g, place, times, FREE, 2, layers=1, depth=8).run([0.0] * n)
    assert n / result.end == pytest.approx(1 / cycle, rel=0.02)
    assert n / result.end <= 1 / cycle * (1 + 1e-9)


def test_md1_mean_wait_matches_the_closed_form() -> None:
    """One device, one kernel of D seconds, Poisson arrivals at rho = 0.6: the mean wait in
    queue is rho D / (2 (1 - rho))."""
    d, rho = 1e-3, 0.6
    g = Graph((Kernel(0, "k", "elementwise", 0, {"in": 4}, {"out": 4}),), {"in": 4, "out": 4},
              {"out": 0}, {"in": (0,)}, ("in",), ("out",))
    rng = random.Random(11)
    t, arrivals = 0.0, []
    for _ in range(40000):
        t += rng.expovariate(rho / d)
        arrivals.append(t)
    result = Server(g, [0], [[d]], LINK, 1, depth=1).run(arrivals)
    waits = [r.start - r.arrival for r in result.requests]
    assert sum(waits) / len(waits) == pytest.approx(rho * d / (2 * (1 - rho)), rel=0.05)


def test_every_request_is_served_once_and_the_run_repeats() -> None:
    g, times, place = _case(2, n=9, carried=True)
    arrivals = [i * 2e-5 for i in range(50)]
    runs = [Server(g, place, times, LINK, 2, layers=3, depth=4).run(arrivals)
            for _ in range(2)]
    for r in runs[0].requests:
        assert r.kernels == 3 * len(g.kernels) and r.finish >= r.start >= r.arrival
    assert [r.finish for r in runs[0].requests] == [r.finish for r in runs[1].requests]


def test_arrivals(tmp_path) -> None:
    from pimbuild.core.errors import ConfigError
    from pimbuild.targets.gpus.systems import arrivals

    a = arrivals.poisson(100.0, 20000, 1020, 129, seed=3)
    gaps = [y.arrival_s - x.arrival_s for x, y in zip(a, a[1:], strict=False)]
    assert sum(gaps) / len(gaps) == pytest.approx(0.01, rel=0.03)
    assert a == arrivals.poisson(100.0, 20000, 1020, 129, seed=3)
    assert all(r.arrival_s == 0 for r in arrivals.offline(5, 1, 1))
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n0.5,10,3\n0.1,20,4\n")
    assert [r.input_tokens for r in arrivals.trace(path)] == [20, 10]
    path.write_text("arrival_s,input_tokens,output_tokens\n0.5,ten,3\n")
    with pytest.raises(ConfigError, match="trace.csv:2: .input_tokens. must be a whole number"):
        arrivals.trace(path)
    with pytest.raises(ConfigError, match="needs a header"):
        (tmp_path / "bad.csv").write_text("t,i,o\n1,2,3\n")
        arrivals.trace(tmp_path / "bad.csv")


def test_summary_percentiles_by_hand() -> None:
    from pimbuild.targets.gpus.systems.engine import percentile

    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0 and percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0 and percentile([3.0], 99) == 3.0
    g, times, place = _case(4, n=5)
    s = Server(g, place, times, LINK, 2, depth=2).run([0.0, 0.0, 1e-3]).summary()
    assert s["p50_latency_s"] <= s["p99_latency_s"] and 0 < s["busy_share_0"] <= 1


# -- serving: prefill + decode with continuous batching (targets/gpus/systems/serving.py) --

from pimbuild.targets.gpus.systems import serving, serving_systems  # noqa: E402
from pimbuild.targets.gpus.systems.arrivals import Request, offline, poisson  # noqa: E402
from pimbuild.targets.gpus.systems.engine import segments  # noqa: E402


@pytest.mark.parametrize("seed", range(8))
def test_segments_run_an_isolated_forward_exactly_as_kernel_by_kernel(seed: int) -> None:
    g, times, place = _case(seed, n=12, carried=seed % 2 == 0)
    kernelwise = Server(g, place, times, LINK, 2)
    kernelwise.env.process(kernelwise.forward(serving.Forward(g, place, times)))
    kernelwise.env.run()
    segs, home = segments(g, place, times)
    merged = Server(g, place, times, LINK, 2)
    merged.env.process(merged.forward_segments(segs, home))
    merged.env.run()
    assert merged.env.now == pytest.approx(kernelwise.env.now, rel=1e-12)
    assert len(segs) <= len(g.kernels)


def _plan(seed: int, n_dev: int = 2, layers: int = 3):
    pre_g, pre_t, pre_p = _case(seed, n=8)
    dec_g, dec_t, dec_p = _case(seed + 100, n=8, carried=True)
    if n_dev == 1:
        pre_p, dec_p = [0] * 8, [0] * 8
    return serving.Plan(serving.Phase(pre_g, pre_p, pre_t, layers, 100),
                        serving.Phase(dec_g, dec_p, dec_t, layers, 4))


def test_one_request_on_one_device_is_its_prefill_and_decode_steps() -> None:
    plan = _plan(1, n_dev=1)
    out = serving.Serving({"one": plan}, {}, LINK, 1, batch=4).serve([Request(0.0, 100, 5)])
    prefill = 3 * sum(t[0] for t in plan.prefill.times)
    step = 3 * sum(t[0] for t in plan.decode.times)
    t = out.requests[0]
    assert t.first_token == pytest.approx(prefill, rel=1e-12)
    assert t.finish == pytest.approx(prefill + 4 * step, rel=1e-12)
    assert out.forwards == {"prefill": 1, "decode": 4}
    assert out.summary()["mean_decode_batch"] == 1.0


def test_collapsed_layers_equal_layer_by_layer_one_forward_at_a_time() -> None:
    plan = _plan(2, n_dev=1)
    reqs = [Request(1.0 * i, 100, 6) for i in range(30)]  # each done before the next
    a = serving.Serving({"p": plan}, {}, LINK, 1, batch=4, depth=1).serve(reqs).summary()
    b = serving.Serving({"p": plan}, {}, LINK, 1, batch=4, depth=1, collapse_layers=False
                        ).serve(reqs).summary()
    for key in ("tokens_per_s", "p99_ttft_s", "p50_tpot_s", "mean_normalized_latency_s"):
        assert a[key] == pytest.approx(b[key], rel=1e-9), key


def test_collapsed_layers_stay_close_to_layer_by_layer_when_pipelined() -> None:
    """Pipelined on two devices the granularity of interleaving differs (a segment of L
    layers against single kernels), so the two agree closely, not exactly."""
    plan = _plan(7)
    reqs = offline(60, 100, 6)
    a = serving.Serving({"p": plan}, {}, LINK, 2, batch=4, depth=8).serve(reqs).summary()
    b = serving.Serving({"p": plan}, {}, LINK, 2, batch=4, depth=8, collapse_layers=False
                        ).serve(reqs).summary()
    assert a["tokens_per_s"] == pytest.approx(b["tokens_per_s"], rel=0.05)


def test_every_request_is_served_once_with_all_its_tokens() -> None:
    plan = _plan(3)
    reqs = [Request(r.arrival_s, 100, 1 + i % 7)
            for i, r in enumerate(poisson(400.0, 120, 100, 1, seed=5))]
    out = serving.Serving({"p": plan}, {}, LINK, 2, batch=8, depth=4).serve(reqs)
    assert len(out.requests) == 120
    assert all(t.generated == t.request.output_tokens and t.finish >= t.first_token
               >= t.request.arrival_s for t in out.requests)
    assert out.forwards["prefill"] == 120
    # every decode forward advances at most `batch` requests one token each
    assert out.forwards["decode"] * 8 >= sum(t.generated - 1 for t in out.requests)
    assert 1 < out.summary()["mean_decode_batch"] == pytest.approx(
        sum(t.generated - 1 for t in out.requests) / out.forwards["decode"])
    shares = out.breakdown[0]
    assert sum(shares.values()) == pytest.approx(1.0)


def test_the_same_seed_gives_the_same_serving() -> None:
    plan = _plan(4)
    runs = [serving.Serving({"p": plan}, {}, LINK, 2, batch=4).serve(
        poisson(300.0, 60, 100, 5, seed=9)).summary() for _ in range(2)]
    assert runs[0] == runs[1]


def test_the_monitor_switches_to_throughput_under_load_and_back() -> None:
    fast, slow = _plan(5), _plan(6)
    plans = {"throughput": fast, "latency": slow}
    monitor = serving.Monitor(window_s=2e-3, beta=1.5, stall_s=1e-4)
    loaded = serving.Serving(plans, {}, LINK, 2, batch=4, monitor=monitor, start="latency"
                             ).serve(offline(200, 100, 4))
    assert loaded.switches >= 1
    idle = serving.Serving(plans, {}, LINK, 2, batch=4, monitor=monitor, start="throughput")
    idle.serve(poisson(20.0, 40, 100, 4, seed=2))
    assert idle.current == "latency" and idle.switches >= 1
    never = serving.Serving(plans, {}, LINK, 2, batch=4, monitor=serving.Monitor(
        2e-3, 1e9, 1e-4), start="latency").serve(offline(200, 100, 4))
    assert never.switches == 0


def test_a_longer_prompt_scales_the_prefill() -> None:
    plan = _plan(8, n_dev=1)
    prefill = 3 * sum(t[0] for t in plan.prefill.times)
    out = serving.Serving({"one": plan}, {}, LINK, 1, batch=4).serve(
        [Request(0.0, 250, 1), Request(10.0, 0, 1)])
    first, second = out.requests
    assert first.finish == pytest.approx(2.5 * prefill, rel=1e-12)
    assert second.finish - 10.0 == pytest.approx(prefill, rel=1e-12)  # 0: the recipe's own


def test_the_next_decode_step_waits_for_the_kv_deltas() -> None:
    """The new keys are written on device 1, the cache is read on device 0: every step's
    delta crosses the link, and the request's next step starts when it has arrived."""
    k0 = Kernel(0, "attn", "elementwise", 0, {"x": 4, "cache": 1000}, {"y": 4})
    k1 = Kernel(1, "kproj", "elementwise", 0, {"x": 4}, {"knew": 100_000})
    dec = Graph((k0, k1), {"x": 4, "cache": 1000, "y": 4, "knew": 100_000},
                {"y": 0, "knew": 1}, {"x": (0, 1), "cache": (0,)}, ("x", "cache"), ("y",),
                {"cache": "knew"}, frozenset({"cache"}))
    pre = Graph((Kernel(0, "p", "elementwise", 0, {"x": 4}, {"h": 4}),), {"x": 4, "h": 4},
                {"h": 0}, {"x": (0,)}, ("x",), ("h",))
    times = [[1e-3, 1e-3], [1e-3, 1e-3]]
    plan = serving.Plan(serving.Phase(pre, [0], [[1e-3, 1e-3]], 1),
                        serving.Phase(dec, [0, 1], times, 1))
    assert plan.deltas() == [(1, 0, 100_000)]
    tpot = {}
    for gbps in (1000.0, 0.1):
        link = Link(gbps, 0.0)
        out = serving.Serving({"p": plan}, {}, link, 2, batch=1).serve([Request(0.0, 0, 4)])
        tpot[gbps] = out.summary()["p50_tpot_s"]
    def slower(n: int) -> float:
        return Link(0.1, 0.0).seconds(n) - Link(1000.0, 0.0).seconds(n)
    # 3 decode steps, each sends x to device 1 (4 B); the last two also wait for the delta
    # of the step before
    assert tpot[0.1] - tpot[1000.0] == pytest.approx(
        (2 * slower(100_000) + 3 * slower(4)) / 3, rel=1e-9)


def test_a_prefill_without_the_cache_results_is_one_error() -> None:
    from pimbuild.core.errors import RecipeError

    dec = {"outputs": ["h", "k", "v"], "state": {"arg1": "k", "arg2": "v"}}
    assert serving.kv_map({"outputs": ["ph", "pk", "pv"]}, dec) == {"pk": "arg1",
                                                                     "pv": "arg2"}
    with pytest.raises(RecipeError, match="the prefill phase returns 1 result"):
        serving.kv_map({"outputs": ["ph"]}, dec)


def test_instances_taking_requests_in_turn_add_their_rates() -> None:
    """PD over three devices (``serving_systems.in_turn``): two decode devices each batch their own
    requests, so a decode-bound split serves twice the tokens of one decode device; two
    prefill devices feeding one decode device share its batches (split batches would halve
    it). Offline, decode-bound, it matches the closed form (``closedform.pd``) but for the
    first token, which prefill gives: output_len - 1 decode steps per request."""
    from pimbuild.targets.gpus.systems import closedform

    pre_g, pre_t, _ = _case(1)
    dec_g, dec_t, _ = _case(101, carried=True)
    pre_t = [[row[0]] * 3 for row in pre_t]
    dec_t = [[6 * row[0]] * 3 for row in dec_t]  # decode is the bottleneck

    def phase(g, times, device: int, tokens: int) -> serving.Phase:
        return serving.Phase(g, [device] * len(g.kernels), times, 1, tokens)

    w = closedform.Workload(100, 20, batch=4)
    got = {}
    for first, rest in (([0], [1]), ([0], [1, 2]), ([0, 1], [2])):
        turns = serving_systems.in_turn([phase(pre_g, pre_t, p, 100) for p in first],
                                [phase(dec_g, dec_t, d, 4) for d in rest], LINK, 3)
        for side, on in (("prefill", first), ("decode", rest)):  # shares follow the rates
            phases = {getattr(p, side).place[0]: getattr(p, side) for p in turns}
            rates = [1 / phases[d].critical_path(LINK, 3) for d in on]
            picks = [sum(getattr(p, side).place[0] == d for p in turns) for d in on]
            assert picks == pytest.approx([len(turns) * r / sum(rates) for r in rates], abs=1)
        out = serving.Serving({"pd": turns}, {}, LINK, 3, batch=w.batch).serve(
            offline(200, 100, w.output_len))
        assert len(out.requests) == 200 and out.forwards["prefill"] == 200
        got[len(first), len(rest)] = out.summary()["tokens_per_s"]
        closed = closedform.pd(w, [sum(r[0] for r in pre_t)] * len(first),
                             [sum(r[0] for r in dec_t)] * len(rest), 0, LINK)
        assert got[len(first), len(rest)] * (w.output_len - 1) / w.output_len == \
            pytest.approx(closed, rel=0.01)
    assert got[1, 2] == pytest.approx(2 * got[1, 1], rel=0.02)
    assert got[2, 1] == pytest.approx(got[1, 1], rel=0.01)


def test_a_request_keeps_its_turn_from_prefill_to_decode() -> None:
    """AF on three devices, attention taking requests in turn on devices 0 and 1: the n-th
    request's prefill writes its KV cache on device n mod 2, where its decode reads it, so no
    cache crosses the link (over a link where a cache takes 8 s, the run ends as fast as
    over a free one; with the turns' decodes swapped every cache crosses)."""
    k_pre = Kernel(0, "attn", "elementwise", 0, {"x": 4}, {"kv": 10**9})
    pre = Graph((k_pre,), {"x": 4, "kv": 10**9}, {"kv": 0}, {"x": (0,)}, ("x",), ())
    k0 = Kernel(0, "attn", "elementwise", 0, {"x": 4, "cache": 10**9}, {"y": 4})
    k1 = Kernel(1, "ffn", "elementwise", 0, {"y": 4}, {"z": 4})
    dec = Graph((k0, k1), {"x": 4, "cache": 10**9, "y": 4, "z": 4}, {"y": 0, "z": 1},
                {"x": (0,), "cache": (0,), "y": (1,)}, ("x", "cache"), ("z",), {},
                frozenset({"cache"}))
    times = [[1e-3] * 3, [1e-3] * 3]
    turns = tuple(serving.Plan(serving.Phase(pre, [a], [[1e-3] * 3], 1),
                               serving.Phase(dec, [a, 2], times, 1)) for a in (0, 1))
    assert [p.kv_moves({"kv": "cache"}) for p in turns] == [[], []]
    crossed = serving.Plan(turns[0].prefill, turns[1].decode)
    assert crossed.kv_moves({"kv": "cache"}) == [(0, 1, 10**9)]
    swapped = (crossed, serving.Plan(turns[1].prefill, turns[0].decode))
    slow = Link(1.0, 0.0)  # 8 s for a cache, 32 ns for the 4-byte activations
    ends = [serving.Serving({"af": t}, {"kv": "cache"}, link, 3, batch=2).serve(
        offline(6, 0, 3)).end for t, link in ((turns, slow), (turns, FREE), (swapped, slow))]
    assert ends[0] == pytest.approx(ends[1], rel=1e-3)
    assert ends[2] > 8.0


def test_twin_devices_are_simulated_once() -> None:
    """Twins (equal but for their label) serve alike, except home, the first device, where
    requests enter and results leave: it has no twin, but alone a device is its own home."""
    from pimbuild.targets.gpus.systems import devicesets
    from pimbuild.targets.gpus.systems.devicesets import two_sets
    from pimbuild.targets.gpus.target import Device

    def device(key: str, price: float) -> Device:
        return Device(key, key.split("#")[0], 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, price)

    def kept(devices: list[Device]) -> list:
        return [s for s in two_sets(3) if devicesets.first_of_kind(devices, list(s))]

    l40s, a1, a2 = device("l40s", 1.0), device("a100#1", 2.0), device("a100#2", 2.0)
    assert kept([l40s, a1, a2]) == [([0], [1, 2]), ([1], [0, 2]), ([0, 1], [2]),
                                    ([1, 2], [0])]
    assert [d for d in range(3) if devicesets.first_of_kind([l40s, a1, a2], [[d]])] == [0, 1]
    assert len(kept([a1, a2, l40s])) == 6  # a100#1 is home
    assert [d for d in range(3) if devicesets.first_of_kind([a1, a2, l40s], [[d]], home=None)
            ] == [0, 2]
    assert len(kept([l40s, a1, device("a100#2", 2.5)])) == 6  # priced apart: not twins
    # the simulation's splits in a given order (best first), twins dropped, at most a limit
    devices = [l40s, a1, a2]
    sets = two_sets(3)
    order = [5, 4, 3, 2, 1, 0]
    assert serving_systems._picked(devices, sets, order, None) == [5, 2, 1, 0]
    assert serving_systems._picked(devices, sets, order, 2) == [5, 2]


def test_request_distribution_shares_requests_by_capacity() -> None:
    """Replicas take requests in proportion to their rates: a device twice as fast serves
    twice the requests, and offline the replicas finish together, so request distribution
    serves what the two alone serve together (round robin would leave the slow one last:
    about 2 x its rate, 2/3 of that)."""
    from dataclasses import replace

    fast = _plan(9, n_dev=1)
    slow = serving.Plan(*(replace(p, times=[[2 * t for t in row] for row in p.times])
                          for p in (fast.prefill, fast.decode)))
    alone = [serving.System({"alone": p}, 1, 1.0) for p in (fast, slow)]
    reqs = offline(90, 100, 12)
    shares = serving.dispatch(alone, reqs, 4, LINK)
    assert [len(s) for s in shares] == [60, 30]
    assert serving.dispatch([alone[0]] * 3, reqs, 4, LINK) == [reqs[0::3], reqs[1::3],
                                                               reqs[2::3]]
    rd = serving.run(serving.System({}, 2, 2.0, alone), reqs, {}, LINK, 4, 8, None)
    each = [serving.run(s, reqs, {}, LINK, 4, 8, None)["tokens_per_s"] for s in alone]
    assert rd["requests"] == 90
    assert rd["tokens_per_s"] == pytest.approx(sum(each), rel=0.05)


def test_weighted_picks_follow_the_rates() -> None:
    assert serving.weighted([1.0, 1.0, 1.0], 6) == [0, 1, 2, 0, 1, 2]
    picks = serving.weighted([1.0, 2.0, 4.0], 70)
    assert [picks.count(i) for i in range(3)] == [40, 20, 10]
    assert serving.weighted([2.0], 3) == [0, 0, 0]
    assert serving.weighted([0.0, 0.0], 4) == [0, 1, 0, 1]  # no work: still in turn
