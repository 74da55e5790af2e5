"""Kernel-level placement and AF in the engine (``enginesim.placed``): a layer's cost summed
layer by layer is the unrolled stack's, placements per bucket, memory, and the command."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from pimbuild.core.errors import ConfigError
from pimbuild.targets.gpus.costmodel import cost, ddg
from pimbuild.targets.gpus.costmodel.cost import Link
from pimbuild.targets.gpus.enginesim import cli, placed, shape
from pimbuild.targets.gpus.kerneltime import ops
from tests.targets.gpus.test_enginesim import BIG, LLAMA31_8B, TINY, config

LINK = Link(200, 5.0)


def roofline(flops_per_s: float, bytes_per_s: float):
    def seconds(o: ops.Op) -> float:
        flops, moved = o.work()
        return 2e-6 + max(flops / flops_per_s, moved / bytes_per_s)
    return seconds


FAST, SLOW = roofline(3e14, 2e12), roofline(3.6e14, 0.86e12)  # A100-like, L40S-like


@pytest.mark.parametrize("seed", range(8))
def test_layer_costs_summed_are_the_unrolled_stacks(tmp_path: Path, seed: int) -> None:
    """``layer_cost`` summed over the layers, each entering where the one before exits (the
    first where the last exits), is ``cost.critical_path`` and ``cost.load_vector`` of the
    unrolled graph, for any placement."""
    rng = random.Random(seed)
    m = shape.load(config(tmp_path, TINY))
    layers, tokens = 4, rng.choice([1, 7, 300])
    g = placed.layer_graph(m, tokens)
    n = len(g.kernels)
    times = [[rng.uniform(1e-6, 1e-4) for _ in range(2)] for _ in range(n)]
    p = [rng.randrange(2) for _ in range(n * layers)]
    kappa = rng.choice([0.0, 0.5, 1.0])
    path, load = 0.0, [0.0] * 6
    for j in range(layers):
        cp, vector = placed.layer_cost(g, tuple(p[j * n:(j + 1) * n]), p[j * n - 1], times,
                                       LINK, kappa)
        path += cp
        load = [a + b for a, b in zip(load, vector, strict=True)]
    u = ddg.unroll(g, layers)
    assert path == pytest.approx(cost.critical_path(u, p, times * layers, LINK, 2), rel=1e-12)
    assert load == pytest.approx(cost.load_vector(u, p, times * layers, LINK, 2, kappa),
                                 rel=1e-12)


def _placed(tmp_path: Path, c: dict, memories=(80, 48), **kw) -> placed.Placed:
    m = shape.load(config(tmp_path, c))
    mems = [shape.Memory(gb * 2**30) for gb in memories]
    return placed.Placed(m, [FAST, SLOW], mems, placed.Setting(LINK, **kw))


def test_each_bucket_is_placed_once_and_steps_take_their_buckets_plan(tmp_path: Path) -> None:
    p = _placed(tmp_path, LLAMA31_8B, buckets=(1, 8, 64, 512, 2048))
    assert p.replicated and p.buckets == (1, 8, 64, 512, 2048)
    assert placed.bucket(9, p.buckets) == 64 and placed.bucket(5000, p.buckets) == 2048
    assert p.plan(9) is p.plan(64) and len(p.plans) == 1
    big = p.seconds([], [1024] * 64)
    assert big > p.seconds([], [1024] * 8) > 0  # a larger batch takes longer
    # the placed pair beats the slower GPU alone at a large batch (both run)
    slow = placed.Steps(p.m, SLOW).seconds([], [1024] * 64)
    assert big < slow
    # up to ``depth`` micro-batches: never slower than one
    assert p.seconds([(500, 0)], [900] * 40) <= p.split([(500, 0)], [900] * 40, 1)
    assert 0 < p.kv_blocks() and len(p.plans) == len(p.buckets)


def test_buckets_must_increase(tmp_path: Path) -> None:
    for bad, match in (((1, 4, 2), "not increasing"), ((1, 1), "not increasing"),
                       ((0, 4), ">= 1"), ((), ">= 1"), ((True, 4), ">= 1")):
        with pytest.raises(ConfigError, match=match):
            placed.check_buckets(bad)


def test_af_keeps_attention_and_its_cache_on_one_gpu(tmp_path: Path) -> None:
    p = _placed(tmp_path, LLAMA31_8B)
    af = placed.Placed(p.m, [FAST, SLOW], [shape.Memory(80 * 2**30), shape.Memory(48 * 2**30)],
                       placed.Setting(LINK), af=1)
    names = [name for name, *_ in placed.kernels_of(p.m)]
    n = len(names)
    plan = af.plan(64)
    assert {plan[j * n + placed.ATTN] for j in range(p.m.layers)} == {1}
    assert {d for k, d in enumerate(plan) if names[k % n] not in placed.ATTENTION} == {0}
    assert not af.replicated and af.held(0) + af.held(1) == pytest.approx(p.m.weight_bytes)
    # the KV cache on the attention GPU only, less the attention weights there
    per_block = 2 * p.m.kv_heads * p.m.head_dim * 2 * 16 * p.m.layers
    assert af.kv_blocks() == int((af.room[1] - af.held(1)) // per_block)


def test_a_model_no_gpu_holds_alone_is_placed_within_each_memory(tmp_path: Path) -> None:
    """73 GB of weights: neither GPU holds them and the KV cache beside them, so one
    placement, planned with each GPU's memory a constraint, serves every bucket."""
    p = _placed(tmp_path, BIG)
    assert not p.replicated and p.fixed is not None
    assert p.plan(1) is p.plan(2048)
    for d in range(2):
        assert 0 < p.held(d) < p.room[d]
    assert p.held(0) + p.held(1) == pytest.approx(p.m.weight_bytes)
    assert p.kv_blocks() > 0
    with pytest.raises(ConfigError, match="cannot be placed"):
        _placed(tmp_path, BIG, memories=(24, 24))
    # where both hold the weights, ``selective`` keeps one placement and frees the rest:
    # more room for the KV cache than replicated weights leave
    rep, sel = _placed(tmp_path, LLAMA31_8B), _placed(tmp_path, LLAMA31_8B, selective=True)
    assert rep.replicated and not sel.replicated and sel.plan(1) is sel.plan(2048)
    assert sel.held(0) + sel.held(1) == pytest.approx(sel.m.weight_bytes)
    assert sel.kv_blocks() > rep.kv_blocks()
    # a GPU that holds every weight beside one placement: a step may run on it alone, and
    # its KV room is what the whole model leaves
    whole = _placed(tmp_path, LLAMA31_8B, whole=(0,))
    assert whole.full == [True, False] and whole.fixed is not None
    assert whole.plan(1) == [0] * len(whole.fixed)  # one sequence: the fast GPU alone
    assert whole.held(1) < whole.m.weight_bytes
    with pytest.raises(ConfigError, match="cannot hold every weight"):
        _placed(tmp_path, BIG, memories=(48, 80), whole=(0,))


def test_serve_command_places_kernels_and_names_what_cannot_run(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,300,20\n0.01,500,10\n")
    base = ["--trace", str(trace), "--device", "a100,l40s"]
    tiny = ["--model-config", str(config(tmp_path, TINY))]
    for flag, what in (("--placed", "kernels placed over a100+l40s"),
                       ("--af", "AF over a100+l40s")):
        assert cli.main([*base, *tiny, flag, "--json", str(tmp_path / "p.json")]) == 0
        out = capsys.readouterr().out
        assert what in out and "2 requests" in out and "bucket placements" in out
        rows = json.loads((tmp_path / "p.json").read_text())["devices"]["a100+l40s"]["buckets"]
        assert [r["tokens"] for r in rows] == [b for b in placed.BUCKETS if b <= 2048]
        if flag == "--af":  # attention on the first GPU, the rest on the second
            assert all(r["alone_on"] is None and r["attention_on_second"] == 0 for r in rows)
    big = ["--model-config", str(config(tmp_path, BIG, "big.json"))]
    assert cli.main([*base, *big, "--placed"]) == 0
    assert "one placement, weights where it runs them" in capsys.readouterr().out
    for extra, match in ((["--device", "l40s"], "infeasible: on l40s"),
                         (["--placed", "--buckets", "1,8,4"], "are not increasing"),
                         (["--placed", "--buckets", "1,x"], "whole numbers"),
                         (["--placed", "--depth", "0"], "--depth must be >= 1"),
                         (["--placed", "--device", "a100"], "--placed takes two devices"),
                         (["--placed", "--pp"], "different systems"),
                         (["--placed", "--whole", "h100"], "is not one of --device"),
                         (["--pd", "--whole", "a100"], "--whole applies to --placed only"),
                         (["--af", "--selective"], "--selective applies to --placed only"),
                         (["--buckets", "1,2"], "--buckets applies to --placed only"),
                         (["--pp", "--depth", "3"], "--depth applies to --placed or --af"),
                         (["--placed", "--selective", "--whole", "a100"], "two memory layouts")):
        args = [*base, *big, *extra]
        if "--device" in extra:
            args = [a for i, a in enumerate(args) if i not in (2, 3)]
        assert cli.main(args) == 1
        err = capsys.readouterr().err
        assert err.startswith("error: ") and match in err and err.count("\n") == 1


MOE = {**TINY, "num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 256}


def test_routing_patterns_share_every_token_k_ways() -> None:
    from pimbuild.targets.gpus.enginesim.routing import Routing

    for pattern in ("balanced", "zipf:0", "zipf:1.5", "router:3"):
        r = Routing(pattern, 8, 2)
        for t in (1, 3, 64, 1000):
            c = r.counts(t)
            assert len(c) == 8 and sum(c) == 2 * t and max(c) <= t and min(c) >= 0
    assert Routing("balanced", 8, 2).counts(8) == (2,) * 8
    assert Routing("zipf:0", 8, 2).counts(100) == Routing("balanced", 8, 2).counts(100)
    skewed = Routing("zipf:1.5", 8, 2).counts(1000)
    assert list(skewed) == sorted(skewed, reverse=True) and skewed[0] == 1000  # capped
    assert Routing("router:3", 8, 2).counts(50) == Routing("router:3", 8, 2).counts(50)
    assert Routing("router:3", 8, 2).counts(500) != Routing("router:4", 8, 2).counts(500)
    for bad in ("zipf", "zipf:-1", "zipf:x", "router:y", "uniform", "balanced:2"):
        with pytest.raises(ConfigError, match="unknown routing pattern"):
            Routing(bad, 8, 2)


def test_a_mixture_of_experts_runs_its_experts_as_one_fused_kernel(tmp_path: Path,
                                                                   capsys) -> None:
    """The router, then every activated expert in one kernel, timed as the GEMMs of the
    same work (the activated experts' weights side by side over the mean rows); a routing
    pattern changes the kernel times of its own DDG, not the buffers."""
    m = shape.load(config(tmp_path, MOE))
    names = [name for name, *_ in placed.kernels_of(m)]
    assert names[5:] == ["router", "experts", "input_layernorm"]
    w = placed.weights(m)
    home = m.weight_bytes - m.layers * sum(w)
    assert home == 2 * (2 * m.vocab * m.hidden + m.hidden)  # embedding, head, final norm
    calls = []

    def clock(o: ops.Op) -> float:
        calls.append(o)
        return FAST(o)

    steps = placed.Steps(m, clock)
    t = steps.fused((3, 0, 1, 0, 0, 0, 0, 0))  # two experts active, 4 rows
    assert [(o.op, o.m, o.n, o.k) for o in calls if o.op == "linear"] == \
        [("linear", 2, 256, 2 * 256 * 2), ("linear", 2, 256 * 2, 256)]
    assert t == pytest.approx(sum(FAST(o) for o in calls))
    assert steps.fused((0,) * 8) == 0.0
    skewed, balanced = _placed(tmp_path, MOE, routing="zipf:2"), _placed(tmp_path, MOE)
    assert skewed.graph(16).buffer_bytes == balanced.graph(16).buffer_bytes
    e = names.index("experts")
    assert skewed.times(16, (), 16, 64)[e] != balanced.times(16, (), 16, 64)[e]
    assert skewed.seconds([], [64] * 32) > skewed.seconds([], [64]) > 0
    # a dense model refuses a routing pattern; a bad one is one error line
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,input_tokens,output_tokens\n0,30,5\n")
    base = ["--trace", str(trace), "--device", "a100"]
    assert cli.main([*base, "--model-config", str(config(tmp_path, MOE, "moe.json")),
                     "--routing", "router:1"]) == 0
    for model, routing, match in ((TINY, "zipf:1", "not a mixture of experts"),
                                  (MOE, "zipf:-2", "unknown routing pattern")):
        assert cli.main([*base, "--model-config", str(config(tmp_path, model, "m.json")),
                         "--routing", routing]) == 1
        assert match in capsys.readouterr().err


def test_bucket_placements_are_kept_in_the_store_and_reused(tmp_path: Path) -> None:
    """Each bucket's placement is an artifact keyed by what the planner reads: a second
    engine with the same inputs plans nothing; another link is planned anew; buckets whose
    DDGs are the same share one artifact."""
    from pimbuild.core.artifacts import Store

    m = shape.load(config(tmp_path, TINY))
    mems = [shape.Memory(gb * 2**30) for gb in (80, 48)]
    store = Store(tmp_path / "store")
    s = placed.Setting(LINK, buckets=(1, 2, 8, 64))

    def engine(setting: placed.Setting) -> placed.Placed:
        p = placed.Placed(m, [FAST, SLOW], mems, setting, store=store)
        p.plan_all()
        return p

    first = engine(s)
    keys = list((tmp_path / "store" / "serve_plan").iterdir())
    assert len(keys) == 3 and first.reused == 1  # buckets 1 and 2: one micro-batch of 1
    again = engine(s)
    assert again.reused == 4 and again.plans == first.plans
    other = engine(placed.Setting(Link(25, 5.0), buckets=(1, 2, 8, 64)))
    assert other.reused == 1 and len(list((tmp_path / "store" / "serve_plan").iterdir())) == 6
