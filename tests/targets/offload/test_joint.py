"""Policy ``joint``: the exact minimum of T_hybrid (docs/design.md §7), against brute force."""

from __future__ import annotations

import dataclasses
import itertools
import random

import pytest

from pimbuild.core.errors import ConfigError
from pimbuild.targets.offload import copymodels, hybrid
from pimbuild.targets.offload.nests import Nest
from pimbuild.targets.offload.policies import joint
from tests.targets.pim.test_pim_model import MODEL, context

ALLOCS = [f"a{i}" for i in range(6)] + ["out"]


def random_nests(rng: random.Random, n: int) -> list[Nest]:
    """Nests in program order reading and writing a few shared allocations, some inside
    loops (invocations > 1), of times that make either side win."""
    nests = []
    for i in range(n):
        n_iter = rng.choice([1, 64, 4096, 1 << 16])
        reads = {a: rng.choice([256, 4096, 1 << 16, 1 << 20])
                 for a in rng.sample(ALLOCS[:-1], rng.randint(0, 3))}
        writes = {a: rng.choice([256, 4096, 1 << 16, 1 << 20])
                  for a in rng.sample(ALLOCS, rng.randint(1, 2))}
        nests.append(Nest(id=10 + i, source_op="aten.x", source_module="", source_node=f"n{i}",
                          n_iter=n_iter, n_total=n_iter * rng.choice([1, 8]),
                          invocations=rng.choice([1, 1, 1, 3]),
                          t_cpu_s=rng.choice([1e-6, 1e-5, 1e-4, 1e-3]) * rng.uniform(0.5, 2),
                          bw_read_gbps=None, store_bound=None, reads=reads, writes=writes,
                          op_mix={"loads": 2, "stores": 1, "arith": rng.randint(0, 8),
                                  "math": rng.choice([0, 0, 1]), "calls": 0}))
    return nests


def brute_force(ctx) -> float:
    ids = [n.id for n in ctx.nests]
    return min(hybrid.hybrid(ctx.nests, {i for i, on in zip(ids, pick, strict=True) if on},
                             ctx.forward_s, ctx.target, ctx.copy_model, ctx.outputs).t_hybrid_s
               for pick in itertools.product((0, 1), repeat=len(ids)))


@pytest.mark.parametrize("seed", range(5))
def test_segment_bytes_extends_upper_bound_nest_by_nest(seed: int) -> None:
    """The DP's incremental segment copies equal eq. 8 on every segment (sizes of one
    allocation differ between nests here, so a re-read replaces, not adds)."""
    nests = random_nests(random.Random(seed), 30)
    for k in range(len(nests)):
        for last, got in enumerate(copymodels.segment_bytes(nests[k:]), start=k):
            assert got == eq8(nests[k:last + 1])


def eq8(seg: list[Nest]) -> tuple[int, int]:
    """Eq. 8 for one segment, stated directly: what it reads before writing, what it writes,
    each allocation once at the size its last access gives, times its executions."""
    written: set[str] = set()
    fetched: dict[str, int] = {}
    flushed: dict[str, int] = {}
    for n in seg:
        fetched |= {a: size for a, size in n.reads.items() if a not in written}
        written |= set(n.writes)
        flushed |= n.writes
    times = max(seg[0].invocations, 1)
    return times * sum(fetched.values()), times * sum(flushed.values())


@pytest.mark.parametrize("copy_model", ["upper_bound", "resident"])
@pytest.mark.parametrize("seed", range(10))
def test_joint_equals_brute_force(seed: int, copy_model: str) -> None:
    rng = random.Random(seed)
    n = rng.randint(3, 12)
    # a cheap switch and a slow host<->PIM copy in turn: both make the placement matter
    target = dataclasses.replace(MODEL, t_sw_us=rng.choice([0.1, 5.0]),
                                 b_mem_gbps=rng.choice([2.0, 20.0]))
    ctx = context(random_nests(rng, n), target=target, copy_model=copy_model)
    offloaded, _ = joint.optimum(ctx)
    got = hybrid.hybrid(ctx.nests, offloaded, ctx.forward_s, ctx.target, ctx.copy_model,
                        ctx.outputs).t_hybrid_s
    assert got == pytest.approx(brute_force(ctx), rel=1e-9)


@pytest.mark.parametrize("copy_model", ["upper_bound", "resident"])
@pytest.mark.parametrize("seed", range(60))  # a fifth of them place a segment across a loop
def test_joint_equals_brute_force_with_nests_in_loops(seed: int, copy_model: str) -> None:
    """Nests inside loops (``scope``: segments do not cross into or out of them; each run of
    a segment switches twice), a triangular one among them."""
    rng = random.Random(100 + seed)
    nests = random_nests(rng, rng.randint(4, 11))
    a = rng.randint(0, len(nests) - 2)
    b = rng.randint(a + 1, len(nests))
    for i in range(a, b):  # one loop of 5 iterations around nests a..b-1
        per = tuple((max(nests[i].n_iter >> k, 1),) * 2 for k in range(5)) if i == a else ()
        nests[i] = dataclasses.replace(nests[i], scope="scf.for#0", invocations=5,
                                       per_invocation=per)
    target = dataclasses.replace(MODEL, t_sw_us=rng.choice([0.1, 5.0]),
                                 b_mem_gbps=rng.choice([2.0, 20.0]))
    ctx = context(nests, target=target, copy_model=copy_model)
    offloaded, _ = joint.optimum(ctx)
    got = hybrid.hybrid(ctx.nests, offloaded, ctx.forward_s, ctx.target, ctx.copy_model,
                        ctx.outputs).t_hybrid_s
    assert got == pytest.approx(brute_force(ctx), rel=1e-9)


@pytest.mark.parametrize("copy_model", ["upper_bound", "resident"])
def test_joint_is_never_above_the_local_search(copy_model: str) -> None:
    rng = random.Random(42)
    for _ in range(5):
        ctx = context(random_nests(rng, 30), copy_model=copy_model)
        offloaded, _ = joint.optimum(ctx)
        local = hybrid.best_placement(ctx.nests, ctx.forward_s, ctx.target, ctx.copy_model,
                                      ctx.outputs, [])

        def cost(placed, ctx=ctx):
            return hybrid.hybrid(ctx.nests, placed, ctx.forward_s, ctx.target,
                                 ctx.copy_model, ctx.outputs).t_hybrid_s
        assert cost(offloaded) <= cost(local) * (1 + 1e-9)


def test_another_copy_model_is_refused() -> None:
    with pytest.raises(ConfigError, match="policy=joint supports sim.copy_model"):
        joint.optimum(context(random_nests(random.Random(1), 3), copy_model="mine"))


@pytest.mark.slow
def test_joint_builds_and_is_the_report_upper_reference(run_build) -> None:
    import json

    from tests.conftest import artifact_dir

    result = run_build(["model=mlp", "policy=joint", "sim.copy_model=resident"])
    report = json.loads((artifact_dir(result, "simulate") / "report.json").read_text())
    assert report["speedup"] == pytest.approx(report["baselines"]["oracle"], rel=1e-9)
    assert all(report["speedup"] >= v - 1e-12 for v in report["baselines"].values())
    decisions = json.loads((artifact_dir(result, "decide") / "decisions.json").read_text())
    assert {d["decided_by"] for d in decisions["decisions"]} == {"joint"}
