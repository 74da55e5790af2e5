"""``pimbuild-opt``: run an MLIR pass pipeline on a file with the bindings pimbuild uses.

The torch-mlir wheel's ``torch-mlir-opt`` binary lacks the upstream passes pimbuild runs, so
stage errors print a repro command for this tool instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from torch_mlir import ir

from pimbuild.frontend.mlir import asm, diagnostic_summary, new_context
from pimbuild.frontend.transforms import add_fastmath, controlled_fusion


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pimbuild-opt", description=__doc__)
    parser.add_argument("input", type=Path)
    parser.add_argument("--pass-pipeline", default="",
                        help="MLIR textual pass pipeline, e.g. 'builtin.module(canonicalize)'")
    parser.add_argument("--controlled-fusion", action="store_true",
                        help="pimbuild's elementwise fusion that never fuses into reductions")
    parser.add_argument("--fastmath", action="store_true",
                        help="add #arith.fastmath<reassoc,contract> to float arithmetic")
    args = parser.parse_args(argv)
    ctx = new_context()
    try:
        module = ir.Module.parse(args.input.read_text(), context=ctx)
        if args.controlled_fusion:
            controlled_fusion(module)
        if args.pass_pipeline:
            from torch_mlir.passmanager import PassManager

            with ctx:
                PassManager.parse(args.pass_pipeline).run(module.operation)
        if args.fastmath:
            add_fastmath(module)
    except ir.MLIRError as e:
        print(f"pimbuild-opt: {diagnostic_summary(e)}", file=sys.stderr)
        return 1
    print(asm(module))
    return 0


if __name__ == "__main__":
    sys.exit(main())
