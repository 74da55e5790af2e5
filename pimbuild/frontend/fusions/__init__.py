"""Fusion modes (``lowering.fusion``): how the linalg-on-tensors module is fused before it is
bufferized and lowered to loop nests. A mode is a module of this package with
``fuse(module)``, fusing in place (or ``package.module:function`` from outside); the passes
they run live in ``pimbuild.frontend.transforms``. A mode with options of its own declares a
dataclass ``Options`` in its module and takes ``fuse(module, options=Options())``;
``lowering.fusion_options`` holds their values, checked like a config group."""

from __future__ import annotations

from pimbuild.core.registry import Registry

FUSIONS = Registry("fusion mode", "lowering.fusion", package="pimbuild.frontend.fusions",
                   attribute="fuse", options="lowering.fusion_options")
