"""Sets of devices (docs/design.md §10): the splits of a device list in two, which devices
are twins (the same GPU under two labels), and which of several equivalent splits is the one
to simulate. The baselines, the closed forms and the tensor-parallel groups all choose from
these."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pimbuild.targets.gpus.costmodel.ddg import HOME


def two_sets(n: int) -> list[tuple[list[int], list[int]]]:
    """Every split of devices ``0..n-1`` into two non-empty sets (first, rest), in order of
    the first's bit mask: on two devices ([0], [1]), then ([1], [0])."""
    return [([d for d in range(n) if mask >> d & 1], [d for d in range(n) if not mask >> d & 1])
            for mask in range(1, 2 ** n - 1)]


def twins(a: Any, b: Any) -> bool:
    """Whether devices ``a`` and ``b`` are equal but for their label (a100#2, a100#3)."""
    return replace(a, key="") == replace(b, key="")


def first_of_kind(devices: list[Any], sets: list[list[int]], home: int | None = HOME
                  ) -> bool:
    """Whether ``sets`` (of device indices) is the first, in index order, of the ways to
    pick sets of the same kinds of device: twins serve alike, so one of them is simulated.
    ``home`` (where requests enter and results leave; None for systems of one device each)
    has no twin."""
    taken: set[int] = set()
    for on in sets:  # each set takes the lowest free twins of its kinds
        if any(e < d and e not in taken and e not in on and d != home and e != home
               and twins(devices[e], devices[d]) for d in on for e in range(len(devices))):
            return False
        taken |= set(on)
    return True
