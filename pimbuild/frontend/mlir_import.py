"""The import into torch-mlir's MLIR, and its errors as one line naming the op."""

from __future__ import annotations

from typing import TYPE_CHECKING

from torch.export import ExportedProgram

from pimbuild.core.errors import RecipeError, first_line
from pimbuild.frontend.exported import _where
from pimbuild.frontend.recipe import FUNC_NAME

if TYPE_CHECKING:
    from pimbuild.core.stage import ModelParams


def import_program(prog: ExportedProgram, weights: str):
    from torch_mlir.extras.fx_importer import FxImporter

    from pimbuild.frontend import mlir

    importer = FxImporter(context=mlir.new_context())
    if weights == "constants":
        # the importer looks for every buffer in state_dict; a non-persistent one is held in
        # constants ("Could not find state mapping for buffer")
        for name in prog.graph_signature.buffers:
            if name not in prog.state_dict and name in prog.constants:
                prog.state_dict[name] = prog.constants[name]
        importer.import_frozen_program(prog, func_name=FUNC_NAME)
    else:
        importer.import_stateless_graph(prog.graph_module.graph, func_name=FUNC_NAME)
    return importer.module


def import_error(p: ModelParams, prog: ExportedProgram, e: Exception) -> RecipeError:
    """torch-mlir's importer failed on the exported program. When the graph holds a
    higher-order operator (torch.cond, while_loop, scan, map: control flow as subgraphs),
    say so: the importer has no lowering for most of them, and its message for one may be a
    bare KeyError."""
    from torch._ops import HigherOrderOperator

    hops = [n for n in prog.graph.nodes
            if n.op == "call_function" and isinstance(n.target, HigherOrderOperator)]
    hint = ""
    if hops:
        hint = (f"; the forward uses torch.ops.higher_order.{hops[0].target.name()}"
                f"{_where(hops[0])}, control flow pimbuild cannot lower: compute both "
                f"branches and select with torch.where, or unroll a loop of fixed trip count "
                f"in Python")
    return RecipeError(f"model '{p.name}' cannot be imported by torch-mlir: {first_line(e)}"
                       f"{hint}")
