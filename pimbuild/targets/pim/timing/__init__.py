"""PIM timing models (``pim.model``): the seconds one invocation of a nest takes on the PIM
cores. A model is a module of this package (or ``package.module:function`` from outside) with
``invocation_time(target, nest, n_iter, n_total) -> float``; it reads the ``pim`` group's
parameters from ``target`` (a ``PimTarget``) and, if it declares a dataclass ``Options``,
its own from ``target.model_options`` (``pim.model_options``, checked like a config group).
It charges the fixed costs as ``target.costs.overhead_s`` defines them, the terms the offload
rule's C1 counts. Built in: ``pimprof`` (the default, PIMProf's PIM side)."""

from __future__ import annotations

from pimbuild.core.registry import Registry

TIMING_MODELS = Registry("PIM timing model", "pim.model", package="pimbuild.targets.pim.timing",
                         attribute="invocation_time", options="pim.model_options")
