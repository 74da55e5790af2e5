"""Fusion ``none``: every linalg op lowers to its own loop nest."""

from __future__ import annotations

from typing import Any


def fuse(module: Any) -> None:
    """Nothing to do."""
