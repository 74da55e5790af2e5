"""A fusion mode of one's own with one typed option (tests/test_plugin_options.py):
``lowering.fusion_options.fuse`` true runs the controlled fusion, false none (one nest per
linalg op). This file is all it takes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pimbuild.frontend.transforms import controlled_fusion


@dataclass(frozen=True)
class Options:
    fuse: bool = True


def fuse(module: Any, options: Options = Options()) -> None:
    if options.fuse:
        controlled_fusion(module)
