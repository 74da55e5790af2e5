"""The lowered function's arguments rebuilt from the recipe and seed (materialize_args), kept
for the last recipe of the process; eager's outputs on them (materialize), and a float64
reference run."""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from pimbuild import recipes
from pimbuild.core.errors import RecipeError
from pimbuild.frontend.recipe import _cast, _real_view, build_recipe
from pimbuild.frontend.run import _attribute, eager

if TYPE_CHECKING:
    from pimbuild.core.stage import ModelParams


def materialize_args(p: ModelParams, sig: dict[str, Any], keep: bool = True
                     ) -> list[np.ndarray]:
    """Rebuild the lowered function's arguments from the recipe, without running the model.

    The last result is kept for the process: the stages of one build and the jobs of a sweep
    ask for the same arguments again (a decoder layer's 200M random weights cost seconds).
    Callers only read them: no lowered program writes its inputs (extract records writes,
    and none goes to an input argument). ``keep=False``: a kernel of the tool's own
    (calibrate's), built, not kept, and not displacing the model's; its arrays are freed
    with the caller's last reference (freeing calibrate's buffers cost the next stage that
    replaced them 50 ms, 1.5 forwards of a LLaMA-7B layer)."""
    if not keep:
        return _materialize(p, sig).args
    return _materialized(p, sig).args


def materialize(p: ModelParams, sig: dict[str, Any]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """``materialize_args`` and PyTorch eager's outputs on them. The eager forward runs the first
    time a process asks for the outputs (the check of ``reinsert``), not for the arguments
    alone (profile, calibrate): the profile stage times the program, not the model."""
    m = _materialized(p, sig)
    if m.expected is None:
        m.expected = _reference(p, sig, m.recipe)
    return m.args, m.expected


def materialized_recipe(p: ModelParams, sig: dict[str, Any]) -> recipes.Recipe:
    """The recipe ``materialize``'s arguments were taken from (its inputs and buffers are
    the arrays it returned): to time eager on the same tensors. A forward of it must keep
    the buffers (``kept_buffers``)."""
    return _materialized(p, sig).recipe


@dataclasses.dataclass
class _Materialized:
    args: list[np.ndarray]
    recipe: recipes.Recipe
    expected: list[np.ndarray] | None = None  # eager's outputs, once asked for


def _materialized(p: ModelParams, sig: dict[str, Any]) -> _Materialized:
    key = json.dumps([dataclasses.asdict(p), sig["args"]], sort_keys=True)
    if key not in _LAST_MATERIALIZED:
        _LAST_MATERIALIZED.clear()
        _LAST_MATERIALIZED[key] = _materialize(p, sig)
    return _LAST_MATERIALIZED[key]


def keep_recipe(p: ModelParams, recipe: recipes.Recipe) -> None:
    """Hand a recipe ``lower`` built to the next ``materialize`` of the same model in this
    process, so a cold build constructs the model (a decoder layer's 200M random weights:
    1.6 s) once, not twice. Used once, then dropped; at most ``KEEP`` are held (calibrate
    lowers its own kernels between a model's lower and profile)."""
    _KEPT_RECIPE[_key(p)] = recipe
    while len(_KEPT_RECIPE) > KEEP:
        _KEPT_RECIPE.pop(next(iter(_KEPT_RECIPE)))


def _key(p: ModelParams) -> str:
    return json.dumps(dataclasses.asdict(p), sort_keys=True)


KEEP = 3
_KEPT_RECIPE: dict[str, recipes.Recipe] = {}


def _materialize(p: ModelParams, sig: dict[str, Any]) -> _Materialized:
    recipe = _KEPT_RECIPE.pop(_key(p), None) or build_recipe(p)
    values = []
    for arg in sig["args"]:
        if "value" in arg:  # a literal of the forward (``_literal``)
            values.append(np.array(arg["value"], dtype=np.dtype(arg["dtype"])
                                   ).reshape(arg["shape"]))
            continue
        tensor = (recipe.inputs[arg["source"]] if arg["kind"] == "input"
                  else _attribute(recipe.module, arg["source"]))
        values.append(np.ascontiguousarray(_real_view(tensor).detach().numpy()))
    return _Materialized(values, recipe)


def _reference(p: ModelParams, sig: dict[str, Any], recipe: recipes.Recipe
               ) -> list[np.ndarray]:
    """Eager's outputs on the recipe whose tensors the arguments view. They stay as they
    were: ``eager`` restores the buffers the forward writes, and ``lower`` refuses a forward
    that writes its inputs or parameters."""
    return [o.detach().numpy() for o in eager(p, recipe, _results_layout(sig))]


def _results_layout(sig: dict[str, Any]) -> list[str | None]:
    """``eager``'s ``layout`` of the lowered function's results, from ``signature.json``: a
    written buffer's name where its new value is returned, else None."""
    layout: list[str | None] = [None] * len(sig["outputs"])
    for name, i in sig.get("mutations", {}).items():
        layout[i] = name
    return layout


def reference64(p: ModelParams, sig: dict[str, Any]) -> list[np.ndarray] | None:
    """Eager's results of the model run in float64 on the same weights and inputs (the
    recipe built again in ``model.dtype``, then widened): the referee of ``check.judge``.
    Float results come back as float64, others as they are; None where the forward cannot
    run in float64 (an op without a float64 kernel, a dtype it insists on)."""
    layout = _results_layout(sig)
    try:
        recipe = build_recipe(p)
        recipe.module = recipe.module._apply(functools.partial(_cast, dtype=torch.float64))
        recipe.inputs = {k: _cast(v, torch.float64) for k, v in recipe.inputs.items()}
        outputs = eager(p, recipe, layout)
    except (RecipeError, RuntimeError, MemoryError):  # no float64 kernel, no room for it
        return None
    return [o.detach().to(torch.float64).numpy() if o.is_floating_point()
            else o.detach().numpy() for o in outputs]


_LAST_MATERIALIZED: dict[str, _Materialized] = {}
