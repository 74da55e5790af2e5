"""Kernels the calibrate task lowers and times on the host (not models to place)."""

from __future__ import annotations

import torch

from pimbuild.recipes import Recipe
from pimbuild.recipes.operators import _Fn


def stream_read(rows: int = 8192, cols: int = 16384) -> Recipe:
    """Row sums of a [rows, cols] float32 buffer: one nest that streams it once, reads only
    (the output is rows floats), parallel over rows, sequential over columns."""
    return Recipe(_Fn(lambda x: x.sum(dim=-1)), {"x": torch.ones(rows, cols)})
