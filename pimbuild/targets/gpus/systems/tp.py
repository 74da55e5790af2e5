"""AF disaggregation with tensor-parallel attention: the paper's cluster baseline (§V-E: "AF
disaggregation runs attention on 2 A100 with TP=2 and FFN on L40s", the A100s joined by
NVLink) in the cost model of ``pimbuild.targets.gpus.costmodel.cost`` (docs/design.md §10).

A TP group of ``t`` twin devices (equal but for their label) runs every attention kernel
together, each device on ``1/t`` of the heads, so the cost model treats the group as one
device:

- an attention kernel takes ``launch + (time - launch) / t`` on it (the launch is not split);
- a buffer an attention kernel writes and a kernel outside attention reads (the output
  projection's partial sums) is all-reduced over ``tp_link`` before it leaves: a ring
  all-reduce, ``2 (t - 1)`` steps of ``bytes / t``;
- a buffer that enters attention from outside (the hidden state from the FFN device or from
  home) reaches one member over the cluster's link and is broadcast to the others over
  ``tp_link``: ``ceil(log2 t)`` transfers of the whole buffer;
- both collectives are charged to the kernel that waits for them (the writer, the first
  reader), as time the group is busy, the way NCCL's kernels occupy the devices.

The KV cache stays with the heads each member owns: nothing of it moves. The group's price
is its members'. The rest of the devices take the FFN side in turn, as in
``closedform.af_ways``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import ceil, log2
from typing import Any, NamedTuple

from pimbuild.targets.gpus.costmodel.cost import Link
from pimbuild.targets.gpus.costmodel.ddg import HOME
from pimbuild.targets.gpus.systems.closedform import af_split
from pimbuild.targets.gpus.systems.devicesets import first_of_kind, twins, two_sets


@dataclass(frozen=True)
class Group:
    """A split for TP attention: ``members`` (device indices, twins, at least two) run
    attention; ``rest`` the other kernels. ``order``: the devices of the grouped context,
    each a tuple of physical indices, the group first or second so that the one holding
    home is first."""

    members: tuple[int, ...]
    rest: tuple[int, ...]

    @property
    def order(self) -> list[tuple[int, ...]]:
        singles = [(d,) for d in self.rest]
        if HOME in self.members:
            return [self.members, *singles]
        return [singles[0], self.members, *singles[1:]]

    @property
    def index(self) -> int:
        """The group's device index in the grouped context."""
        return self.order.index(self.members)


def groups(devices: list[Any]) -> list[Group]:
    """Every split of ``devices`` into a TP group of two or more twins and the rest (one
    device or more), in ``devicesets.two_sets``' order; of splits that differ only by which
    twins they take, the first (``devicesets.first_of_kind``)."""
    return [Group(tuple(a), tuple(r)) for a, r in two_sets(len(devices))
            if len(a) >= 2 and all(twins(devices[a[0]], devices[d]) for d in a)
            and first_of_kind(devices, [a, r])]


def kernel_seconds(seconds: float, launch_s: float, t: int) -> float:
    """One attention kernel on a group of ``t``: its launch, then ``1/t`` of its work."""
    return launch_s + max(seconds - launch_s, 0.0) / t


def collectives(ctx: Any, attention: list[bool], tp_link: Link, t: int) -> list[float]:
    """Seconds of the all-reduces and broadcasts each kernel waits for on a group of ``t``
    (zero outside attention)."""
    g = ctx.graph
    extra = [0.0] * len(g.kernels)
    steps = ceil(log2(t))
    for b, size in g.buffer_bytes.items():
        src = g.source(b)
        readers = g.readers.get(b, ())
        if src is not None and attention[src]:
            if any(not attention[r] for r in readers):
                extra[src] += 2 * (t - 1) * tp_link.seconds(size // t)
        else:
            first = next((r for r in readers if attention[r]), None)
            if first is not None:
                extra[first] += steps * tp_link.seconds(size)
    return extra


def grouped(ctx: Any, devices: list[Any], group: Group, attention: list[bool],
            tp_link: Link) -> tuple[Any, list[Any]]:
    """The context with the group as one device (its attention kernels' times per the
    module's rules; its other kernels' times as one member's, never used by AF) and the
    devices in that order, the group a Device named after its members (``a100#1+a100#2
    (TP=2)``) costing their sum."""
    t = len(group.members)
    lead = devices[group.members[0]]
    extra = collectives(ctx, attention, tp_link, t)
    times = []
    for k, row in enumerate(ctx.times):
        on_group = row[group.members[0]]
        if attention[k]:
            on_group = kernel_seconds(on_group, lead.launch_us * 1e-6, t) + extra[k]
        times.append([on_group if on == group.members else row[on[0]] for on in group.order])
    name = "+".join(devices[d].key for d in group.members) + f" (TP={t})"
    device = replace(lead, key=name, price_per_hour=t * lead.price_per_hour)
    order = [device if on == group.members else devices[on[0]] for on in group.order]
    return replace(ctx, times=times, n_dev=len(order)), order


def af_turns(attention: list[bool], group: Group) -> list[list[int]]:
    """AF's placements in the grouped context: attention on the group, the rest taking the
    requests in turn."""
    rest = [i for i, on in enumerate(group.order) if on != group.members]
    return [[group.index if a else rest[i] for a in attention] for i in range(len(rest))]


class Way(NamedTuple):
    """AF with TP attention on one group: the group's name, the grouped context, its
    devices, AF's turns in it and the group's index among its devices."""

    name: str
    ctx: Any
    devices: list[Any]
    turns: list[list[int]]
    at: int


def ways(ctx: Any, devices: list[Any], tp_link: Link) -> list[Way]:
    """AF with TP attention on every group (``groups``). Empty without twins or without
    attention and other kernels (``closedform.af_split``)."""
    split = af_split(ctx)
    if split is None:
        return []
    attention = [s == 0 for s in split]
    out = []
    for group in groups(devices):
        gctx, order = grouped(ctx, devices, group, attention, tp_link)
        out.append(Way(order[group.index].key, gctx, order, af_turns(attention, group),
                       group.index))
    return out
