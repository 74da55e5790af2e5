"""Fusion ``full``: MLIR's elementwise fusion as it is (``transforms.full_fusion``)."""

from __future__ import annotations

from typing import Any

from pimbuild.frontend.transforms import full_fusion


def fuse(module: Any) -> None:
    full_fusion(module)
