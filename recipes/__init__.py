"""Model recipes: PyTorch builders that return a module and example inputs at fixed shapes.

A recipe is a function ``builder(**size) -> Recipe``; the model config names it as
``"module.path:function"`` and passes ``model.size`` as keyword arguments.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Recipe:
    module: torch.nn.Module
    inputs: dict[str, torch.Tensor]  # forward's positional inputs, in order, by name
    # torch.export dynamic_shapes, by input name; pimbuild rejects any dynamic dimension.
    dynamic_shapes: dict[str, Any] | None = field(default=None)


def resolve(path: str) -> Callable[..., Recipe]:
    """Import ``"package.module:function"`` and return the builder."""
    module_name, _, attr = path.partition(":")
    if not attr:
        raise ValueError(f"recipe '{path}' must look like 'package.module:function'")
    return getattr(importlib.import_module(module_name), attr)


def source_file(path: str) -> str:
    """The source file that defines a recipe (its text is part of the lower stage's key)."""
    return inspect.getsourcefile(resolve(path)) or ""
