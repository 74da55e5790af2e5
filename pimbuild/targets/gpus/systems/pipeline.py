"""Whole-layer splits of a model's identical layers over the devices (pipeline parallelism,
docs/design.md §10): the layer-pipeline baseline (``simulate``) and a period's MIP start
(``decide``).

A split runs the layers as contiguous segments, one per device, over 2 to ``SEGMENTS``
distinct devices in some order. Its cost-model loads (``cost.loads``: per device busy, sent,
received) need no unrolled graph: with one layer per segment every boundary's transfers are
there, and each further layer on device ``d`` adds what a second layer adds to layers all on
``d`` (its compute and its results sent home; the inputs every layer reads from home are
already there). So

    loads(split) = loads(one layer per segment) + sum_i (m_i - 1) delta[d_i]

a vector sum per split, where ``m_i`` layers run on device ``d_i``: the best of the 2,976
splits of 32 layers over 3 devices takes milliseconds, where the unrolled graph's cost model
takes 2 ms a split (test: the sum equals the unrolled graph's loads).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import combinations, pairwise, permutations
from typing import Any

from pimbuild.targets.gpus.costmodel.cost import load_vector
from pimbuild.targets.gpus.planners import unrolled

SEGMENTS = 3  # devices a split uses at most: every split of 2 or 3 devices; past 3 devices
# the splits grow as n!/(n-s)! orders x C(layers - 1, s - 1)


@dataclass(frozen=True)
class Split:
    order: tuple[int, ...]  # the devices, in layer order
    counts: tuple[int, ...]  # layers on each
    cycle_s: float  # the cost model's cycle time of all the layers

    def place(self, kernels_per_layer: int) -> list[int]:
        """The device of every kernel of the unrolled layers."""
        return [d for d, m in zip(self.order, self.counts, strict=True)
                for _ in range(m * kernels_per_layer)]


def splits(n_dev: int, layers: int) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(devices in order, layers on each) of every split of ``layers`` layers over 2 to
    ``SEGMENTS`` distinct devices of ``n_dev``, each device at least one layer."""
    for s in range(2, min(n_dev, layers, SEGMENTS) + 1):
        for order in permutations(range(n_dev), s):
            for cuts in combinations(range(1, layers), s - 1):
                edges = (0, *cuts, layers)
                yield order, tuple(b - a for a, b in pairwise(edges))


def _loads(ctx: Any, place: list[int]) -> list[float]:
    return load_vector(ctx.graph, place, ctx.times, ctx.link, ctx.n_dev, ctx.comm_on_device)


def cycles(one: Any, layers: int) -> Iterator[Split]:
    """Every split of ``layers`` copies of ``one``'s layer (a ``PlanContext`` of one layer)
    with its cycle time, in ``splits``' order, from the sums above."""
    n = len(one.graph.kernels)
    two = unrolled(one, 2)
    delta = [[b - a for a, b in zip(_loads(one, [d] * n), _loads(two, [d] * 2 * n),
                                     strict=True)]
             for d in range(one.n_dev)]
    base: dict[tuple[int, ...], list[float]] = {}
    for order, counts in splits(one.n_dev, layers):
        if order not in base:  # one layer per segment
            base[order] = _loads(unrolled(one, len(order)), [d for d in order
                                                              for _ in range(n)])
        total = base[order]
        for d, m in zip(order, counts, strict=True):
            total = [t + (m - 1) * x for t, x in zip(total, delta[d], strict=True)]
        yield Split(order, counts, max(total))


def best(one: Any, layers: int) -> Split | None:
    """The split with the least cycle time (``cycles``), the first in ``splits``' order
    among equals; None for one layer or one device."""
    return min(cycles(one, layers), key=lambda split: split.cycle_s, default=None)
