"""Model recipes: PyTorch builders that return a module and example inputs at fixed shapes.

A recipe is a function ``builder(**size) -> Recipe``; the model config names it as
``"package.module:function"`` and passes ``model.size`` as keyword arguments. It may live in
any importable package: the lower stage's key hashes every module of that package
(``source_digest``), so editing a helper module of a model rebuilds it. This package is
installed as ``pimbuild.recipes`` and imports torch only when a recipe is built.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


@dataclass
class Recipe:
    module: torch.nn.Module
    inputs: dict[str, torch.Tensor]  # forward's positional inputs, in order, by name
    # torch.export dynamic_shapes, by input name; pimbuild rejects any dynamic dimension.
    dynamic_shapes: dict[str, Any] | None = field(default=None)
    # The model is ``layers`` identical copies of this module in sequence (a decoder layer of
    # a 32-layer model: 32); the GPU target plans one and reuses it (docs/design.md §10).
    layers: int = 1
    # Output tokens one forward produces (a decode step of batch B: B; a prefill: 1 per
    # request, its first token): the GPU target's throughput unit.
    tokens: int = 1
    # "tokens", or "requests" for a model whose request is ``forwards_per_request`` forwards
    # of ``tokens`` requests each (a diffusion model's denoising steps): throughput is then
    # requests per minute.
    unit: str = "tokens"
    forwards_per_request: int = 1
    # Prompt tokens one forward takes in (a prefill of one request: its prompt length; 0 for
    # a decode step): the GPU target's serving simulation scales other prompts from it.
    prompt: int = 0
    # Outputs are counted as torch.export flattens the forward's results: a tensor, or a
    # (nested) tuple, list or dict of tensors, in order, leaf by leaf.
    # Input name -> index of the output that becomes that input of the next layer (the hidden
    # state of a layer stack), and of the next forward of the same layer (``state``: the new
    # keys and values appended to a KV cache, a recurrent state): the GPU target's
    # cross-layer and cross-iteration dependencies.
    carry: dict[str, int] = field(default_factory=dict)
    state: dict[str, int] = field(default_factory=dict)
    # Set by pimbuild, not by a builder: the floating-point dtypes other than ``model.dtype``
    # that the module's parameters and buffers ("parameters": dtype -> how many) and the
    # inputs ("inputs": name -> dtype) had before pimbuild cast them to it.
    cast: dict[str, dict[str, Any]] = field(default_factory=dict, init=False)
    # Set by pimbuild: the kinds of layer that were in training mode and compute otherwise
    # in inference (dropout, batch norm's statistics) before pimbuild called ``eval()``.
    evaluated: list[str] = field(default_factory=list, init=False)
    # Set by pimbuild: the outputs the forward returns as Python scalars (output index ->
    # bool, int or float), which both eager and the lowered program return as 0-d tensors
    # (bool, int64, float64: the scalar's exact value).
    scalars: dict[int, str] = field(default_factory=dict, init=False)


def split(path: str) -> tuple[str, str]:
    module, _, attr = path.partition(":")
    if not module or not attr:
        raise ValueError(f"recipe '{path}' must look like 'package.module:function'")
    return module, attr


def resolve(path: str) -> Callable[..., Recipe]:
    """Import ``"package.module:function"`` and return the builder."""
    module, attr = split(path)
    return getattr(importlib.import_module(module), attr)


def source_files(path: str) -> list[Path]:
    """The source files a recipe may depend on: every ``.py`` file of the top-level package
    that holds its module and of the module's own folder (only the module's file when it is a
    top-level module)."""
    module, _ = split(path)
    top = importlib.util.find_spec(module.split(".")[0])
    own = importlib.util.find_spec(module)
    if top is None or own is None or own.origin is None:
        raise ImportError(f"no module named '{module}'")
    if not own.has_location or not Path(own.origin).is_file():  # built in (``sys``), frozen
        # (``os``), or inside a zip archive: no source file whose change would rebuild
        raise ImportError(f"module '{module}' has no source file on disk ({own.origin})")
    if not top.submodule_search_locations:
        return [Path(own.origin)]
    roots = {*map(Path, top.submodule_search_locations), Path(own.origin).parent}
    return sorted({p for root in roots for p in root.rglob("*.py")})


def source_digest(path: str) -> str:
    """sha256 of the recipe's package sources (file names and contents). pimbuild's own
    recipes have none: ``pimbuild.core.artifacts.code_version``, in every key, covers them under
    names that do not depend on how pimbuild is installed (copied, the ``pimbuild`` package
    holds this folder and the rest of pimbuild; editable, it does not)."""
    if split(path)[0].split(".")[0] == "pimbuild":
        return ""
    h = hashlib.sha256()
    for f in source_files(path):
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]
