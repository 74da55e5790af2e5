"""Fusion ``controlled`` (the default): elementwise producers into elementwise consumers and
data movement into anything, never arithmetic into a reduction
(``pimbuild.frontend.transforms.controlled_fusion``)."""

from __future__ import annotations

from typing import Any

from pimbuild.frontend.transforms import controlled_fusion


def fuse(module: Any) -> None:
    controlled_fusion(module)
