"""Stage ``lower``: recipe -> ``torch.mlir`` -> ``linalg.mlir`` -> ``scf.mlir``.

The model is exported at the recipe's fixed shapes (``torch.export`` + torch-mlir's
decompositions), every FX node's stack trace is rewritten to name its source operator, and the
graph is imported with weights as function arguments (``pimbuild.frontend``). The
linalg-on-tensors IR is fused (``lowering.fusion``, a mode of ``FUSIONS``)
and optionally marked fastmath, then bufferized and lowered to ``scf.parallel`` / ``scf.for``
nests. ``signature.json`` records the function's arguments (parameters and inputs, in order)
and outputs, so any later stage can rebuild the same arguments from the recipe and seed.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import MISSING, DictConfig

from pimbuild import frontend, recipes
from pimbuild.core import check
from pimbuild.core.errors import ConfigError
from pimbuild.core.stage import Inputs, ModelParams, plain
from pimbuild.frontend.fusions import FUSIONS


@dataclass
class ModelConfig:
    name: str = MISSING
    recipe: str = MISSING  # "package.module:function" returning a pimbuild.recipes.Recipe
    # The defaults a user's model file may leave out live here, once (the shipped model files
    # do not repeat them): no keyword arguments, float32, seed 0.
    size: dict[str, int] = field(default_factory=dict)  # the builder's keyword arguments
    dtype: str = "float32"
    seed: int = 0
    # Other phases of the same model (a prefill beside a decode step), by phase name: each a
    # recipe and its size, dtype and seed defaulting to this model's. A stage that reads a
    # phase (its PHASE_READS) gets that phase's stages built too (pimbuild/build/graph.py). None
    # unless the model file names some.
    phases: dict[str, Any] = field(default_factory=dict)
    # model=hf: the transformers architecture, its config and output (pimbuild/recipes/hf.py)
    hf: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoweringConfig:
    fusion: str = MISSING  # a fusion mode (pimbuild.frontend.fusions.FUSIONS)
    fusion_options: dict[str, Any] = field(default_factory=dict)  # its own, if it has any
    fastmath: bool = MISSING
    weights: str = MISSING  # args | constants
    register_block: int | None = MISSING  # None: chosen per host by calibrate's search
    register_block_candidates: list[int] = MISSING  # what the search times


# The model and lowering groups, as ``pimbuild.build.config`` composes them, and the ranges of
# their numbers (``pimbuild.build.config.validate``).
SCHEMAS: dict[str, Any] = {"model": ModelConfig, "lowering": LoweringConfig}
RANGES: dict[str, tuple[Any, ...]] = {
    "model.seed": (">=", 0),
    "lowering.register_block": (">=", 1),
    "lowering.register_block_candidates": (">=", 1),
}
# what calibrate's register-block search times
NONEMPTY = ("lowering.register_block_candidates",)


NAME = "lower"
EIGHT_BIT_TENSOR = re.compile(r"!torch\.vtensor<\[[^\]]*\],[su]i8>")
EIGHT_BIT_CRASH = ("torch-mlir's TorchToLinalg crashes on some arithmetic on int8 / uint8 "
                   "tensors (e.g. mul or sub by a scalar, floor division, a full max, matmul: "
                   "llvm/torch-mlir#4725); compute in int32 or a float type")
TO_LINALG_CRASH = ("torch-mlir's TorchToLinalg crashed on an op of this model (a bug in "
                   "torch-mlir, not in the model): run the repro below on the saved input to "
                   "find the op, then rewrite it or leave it out of the model")
TORCH_BACKEND_CRASH = ("torch-mlir's torch-dialect passes (shape and type refinement, folding, "
                       "decomposition) crashed on an op of this model (a bug in torch-mlir, not "
                       "in the model): run the repro below on the saved input to find the op, "
                       "then rewrite it or leave it out of the model")
TO_SCF_CRASH = ("MLIR's bufferization or lowering to loops crashed on this module (a bug in "
                "MLIR or torch-mlir, not in the model; a value returned twice did so until "
                "transforms.distinct_results): run the repro below on the saved input to find "
                "the op, then rewrite it or leave it out of the model")
READS: tuple[str, ...] = ()
WRITES = ("torch.mlir", "linalg.mlir", "scf.mlir", "signature.json")
DTYPES = ("float32",)
WEIGHTS = ("args", "constants")


@dataclass(frozen=True)
class Params:
    model: ModelParams
    fusion: str
    fastmath: bool
    weights: str
    source_digest: str  # the recipe's package sources: editing any module rebuilds lower
    # the fusion mode's own options (lowering.fusion_options), checked; Options when it runs
    fusion_options: dict[str, Any] = field(default_factory=dict)


def model_params(cfg: DictConfig) -> ModelParams:
    m = plain(cfg.model)
    return ModelParams(name=m["name"], recipe=m["recipe"], size=dict(m["size"]),
                       dtype=m["dtype"], seed=m["seed"], hf=dict(m.get("hf") or {}))


def params(cfg: DictConfig) -> Params:
    model = model_params(cfg)
    validate(model)
    FUSIONS.check(cfg.lowering.fusion)
    if cfg.lowering.weights not in WEIGHTS:
        raise ConfigError(f"lowering.weights '{cfg.lowering.weights}' is not one of "
                          f"{', '.join(WEIGHTS)}")
    try:
        digest = recipes.source_digest(model.recipe)
    except (ImportError, ValueError) as e:
        raise ConfigError(f"model.recipe '{model.recipe}' cannot be found: {e}") from None
    options = FUSIONS.values(cfg.lowering.fusion, plain(cfg.lowering.fusion_options))
    return Params(model=model, fusion=cfg.lowering.fusion, fusion_options=options,
                  fastmath=cfg.lowering.fastmath,
                  weights=cfg.lowering.weights, source_digest=digest)


def validate(p: ModelParams) -> None:
    """Reject bad sizes and dtypes before anything runs or is written."""
    for key, value in p.size.items():
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"model.size.{key} must be a positive integer, got {value!r}")
    if p.dtype not in DTYPES:
        raise ConfigError(f"model.dtype '{p.dtype}' is not supported (choose from "
                          f"{', '.join(DTYPES)})")


def run(inputs: Inputs, p: Params, out: Path) -> None:
    """Write ``torch.mlir``, ``linalg.mlir``, ``scf.mlir`` and ``signature.json``."""
    lower(p, out, inputs.failure_dir)


def lower(p: Params, out: Path, failure_dir: Path) -> None:
    from pimbuild.frontend import mlir, transforms

    recipe = frontend.build_recipe(p.model)
    outputs = frontend.eager(p.model, recipe)
    frontend.check_declarations(p.model, recipe, outputs)
    prog = frontend.export(p.model, recipe)
    layout = frontend.mutation_layout(p.model, prog, list(recipe.inputs))
    if any(slot is not None for slot in layout):  # written buffers are results too
        outputs = frontend.eager(p.model, recipe, layout)
    frontend.fold_splat_constants(prog)
    frontend.nonnegative_scatter_dims(prog.graph_module)
    frontend.annotate_sources(prog.graph_module)
    try:
        module = frontend.import_program(prog, p.weights)
    except Exception as e:
        raise frontend.import_error(p.model, prog, e) from None
    # torch-mlir's passes crash on some ops of some models (its folders on some constants,
    # which frontend.fold_splat_constants now computes first; TorchToLinalg on 8-bit integer
    # arithmetic, on scatter with a negative dim, which the frontend now writes from the
    # front; bufferization on a value returned twice, which transforms.distinct_results now
    # copies), so each pipeline runs in a child process first (about 0.4 s) and a crash is an
    # error line.
    mlir.run_pipeline(module, mlir.TORCH_BACKEND, stage=NAME, failure_dir=failure_dir,
                      isolate=TORCH_BACKEND_CRASH)
    mlir.write_ir(module, out / "torch.mlir")
    eight_bit = EIGHT_BIT_TENSOR.search((out / "torch.mlir").read_text()) is not None
    mlir.run_pipeline(module, mlir.TORCH_TO_LINALG, stage=NAME, failure_dir=failure_dir,
                      isolate=EIGHT_BIT_CRASH if eight_bit else TO_LINALG_CRASH)
    dropped = transforms.drop_asserts(module)
    FUSIONS.call(p.fusion, FUSIONS.options(p.fusion, p.fusion_options), module)
    if p.fastmath:
        transforms.add_fastmath(module)
    transforms.distinct_results(module)
    mlir.write_ir(module, out / "linalg.mlir")
    to_scf = mlir.TM_TENSOR_TO_SCF if mlir.has_dialect(module, "tm_tensor") else mlir.LINALG_TO_SCF
    mlir.run_pipeline(module, to_scf, stage=NAME, failure_dir=failure_dir,
                      isolate=TO_SCF_CRASH)
    mlir.write_ir(module, out / "scf.mlir")
    sig = frontend.signature(prog, recipe, outputs, p.weights, layout)
    sig["float_types"] = sorted(mlir.element_types(module) & set(check.FLOAT_TYPES))
    sig["dropped_asserts"] = dropped
    (out / "signature.json").write_text(json.dumps(sig, indent=2) + "\n")
    frontend.keep_recipe(p.model, recipe)
