"""The PyTorch side of lowering: build a recipe, run it eagerly, export it at fixed shapes,
name every node's source, import it into MLIR, and rebuild the lowered function's arguments.

``annotate_sources`` rewrites each FX node's stack trace so that its MLIR location names its
source: ``File "<module path>|<torch op>#<torch node>|<aten op>", line <i>,`` (the torch op
the model wrote, before decomposition, and the aten op it decomposed into).

torch-mlir is imported only where it is used (export, import, materialize), so that building
and running a recipe (``build_recipe``, the GPU target's ``cuda`` backend) works on a machine
whose Python has torch but no torch-mlir.

The package splits it by job: ``recipe`` (build and check a recipe), ``run`` (run it
eagerly), ``decompose`` (the decompositions the export applies), ``exported`` (export,
refusals by class, rewrites, sources, signature), ``mlir_import`` (the import into MLIR) and
``arguments`` (the lowered function's arguments, kept per process). The rest of the
frontend layer lives here too: ``lower`` (the stage), ``mlir`` (pass pipelines and IR
helpers), ``transforms`` (the fusion choices), and ``complexes`` and ``substitutes``
(rewrites the export needs for complex numbers and unsupported ops).
"""

import importlib
from typing import Any

# name -> the module defining it; imported on first use (PEP 562), so that importing
# ``pimbuild.frontend.lower`` (a stage module) to plan a build imports no torch
_HOME = {
    "keep_recipe": "arguments", "materialize": "arguments", "materialize_args": "arguments",
    "materialized_recipe": "arguments", "reference64": "arguments",
    "decompositions": "decompose", "tensor_overloads": "decompose",
    "annotate_sources": "exported", "export": "exported", "fold_splat_constants": "exported",
    "nonnegative_scatter_dims": "exported", "signature": "exported",
    "import_error": "mlir_import", "import_program": "mlir_import", "build_recipe": "recipe",
    "check_declarations": "recipe", "dtype_name": "recipe", "training_layers": "recipe",
    "eager": "run", "kept_buffers": "run", "mutation_layout": "run", "output_leaves": "run",
}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
