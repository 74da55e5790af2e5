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
``arguments`` (the lowered function's arguments, kept per process).
"""

from pimbuild.frontend.arguments import keep_recipe, materialize, materialized_recipe, reference64
from pimbuild.frontend.decompose import decompositions, tensor_overloads
from pimbuild.frontend.exported import (
    annotate_sources,
    export,
    fold_splat_constants,
    nonnegative_scatter_dims,
    signature,
)
from pimbuild.frontend.mlir_import import import_error, import_program
from pimbuild.frontend.recipe import build_recipe, check_declarations, dtype_name, training_layers
from pimbuild.frontend.run import eager, kept_buffers, mutation_layout, output_leaves

__all__ = [
    "annotate_sources", "build_recipe", "check_declarations", "decompositions", "dtype_name",
    "eager", "export", "fold_splat_constants", "import_error", "import_program", "keep_recipe",
    "kept_buffers", "materialize", "materialized_recipe", "mutation_layout",
    "nonnegative_scatter_dims", "output_leaves", "reference64", "signature",
    "tensor_overloads", "training_layers"
]
