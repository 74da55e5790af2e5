"""The codegen layer: reading and rewriting the lowered loop nests, and running them.

``loops`` and ``bounds`` read ``scf.parallel`` nests; ``extract`` is the stage that lists them
as offloading candidates; ``blocking`` (register blocking and the builder helpers the other
passes share), ``vectile``, ``panels``, ``relayout`` and ``vecmath`` rewrite them for the host;
``jit`` compiles ``scf.mlir`` to LLVM and runs it; ``runtime`` is the marker runtime, a stage.
"""
