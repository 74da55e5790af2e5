"""Name -> implementation tables for the pluggable parts (xDSL's lazy registry; docs/design.md §4).

A registry finds an implementation, in this order, by
1. an explicit ``register(name)`` (a test, a plugin loaded by the user),
2. a module of its package named like the option (``<package>.<name>``), so a
   new policy, target or counter backend is one new file (plus its YAML), and the built-ins
   are listed by no one,
3. an import path given as the name itself (code outside pimbuild): ``"package.module"``
   (the module, or its attribute the registry names: a policy's ``place``) or
   ``"package.module:attribute"``.
Nothing is imported until an implementation is asked for.

An entry may declare options of its own: a dataclass ``Options`` (on the entry, else in its
module), each field's range in its metadata (``field(default=1.0, metadata={"range": (">",
0)})``, ranges as the config writes them). The registry's ``options`` key (``gpus.planner_
options``) holds their values; ``options(name, values)`` checks them as the config checks a
group (exact types, ranges, unknown names refused with the nearest known one; one error line)
and returns the ``Options`` the entry reads: from its context (a policy's, a planner's), or,
for an entry that is a function of its inputs (a copy model, a fusion mode), as the keyword
argument ``options`` that ``call`` passes.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pkgutil
import sys
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from pimbuild.core.errors import ConfigError
from pimbuild.core.schema import check, model_of


class Registry:
    def __init__(self, kind: str, option: str, *, package: str | None = None,
                 attribute: str | None = None,
                 exclude: tuple[str, ...] = (), options: str | None = None) -> None:
        self.kind = kind  # "policy": what an entry is, for messages
        self.option = option  # "policy.name": the config option that names one
        self.package = package  # modules of this package are entries named like the module
        self.attribute = attribute  # the attribute of such a module (None: the module)
        self.exclude = exclude  # modules of the package that are not entries
        self.options_key = options  # the config key of an entry's own options, if any
        self._registered: dict[str, Any] = {}

    def register(self, name: str, impl: Any = None) -> Any:
        """``registry.register("name", impl)``, or ``@registry.register("name")``."""
        if impl is None:
            def decorator(obj: Any) -> Any:
                self._registered[name] = obj
                return obj
            return decorator
        self._registered[name] = impl
        return impl

    def unregister(self, name: str) -> None:
        self._registered.pop(name, None)

    def names(self) -> list[str]:
        """Every name this registry knows without importing anything."""
        found = list(self._registered)
        if self.package:
            spec = importlib.util.find_spec(self.package)
            for info in pkgutil.iter_modules(spec.submodule_search_locations or []):
                if not info.name.startswith("_") and info.name not in self.exclude:
                    found.append(info.name)
        return sorted(set(found))

    def get(self, name: str) -> Any:
        if name in self._registered:
            return self._registered[name]
        if self.package and self._own(name):
            module = importlib.import_module(f"{self.package}.{name}")
            return getattr(module, self.attribute) if self.attribute else module
        if ":" in name or "." in name:  # a module of one's own: its attribute, or it
            path = name if ":" in name else f"{name}:{self.attribute or ''}"
            try:
                return _load(path)
            except (ImportError, AttributeError) as e:
                raise ConfigError(f"{self.option} '{name}' cannot be loaded: {e}") from None
        raise ConfigError(f"unknown {self.kind} '{name}' ({self.option}); choose from: "
                          f"{', '.join(self.names())}, or a module of your own "
                          f"('package.module')")

    def _own(self, name: str) -> bool:
        """Whether ``name`` is a module of the package: one imported already is, without
        listing the package again (the copy model is looked up once per hybrid evaluation, and
        a local search over placements makes many)."""
        if name.startswith("_") or name in self.exclude or "." in name or ":" in name:
            return False
        return f"{self.package}.{name}" in sys.modules or name in self.names()

    def check(self, name: str) -> None:
        """Raise a ConfigError unless ``name`` names an entry (imports nothing for built-ins
        and modules of the package)."""
        if name in self._registered or (self.package and self._own(name)):
            return
        self.get(name)

    def options(self, name: str, values: Mapping[str, Any] | None) -> Any:
        """Entry ``name``'s ``Options`` made from ``values`` and checked (None when it
        declares none; then any value is refused)."""
        schema = options_of(self.get(name))
        where = f"{self.options_key or 'options'} of {self.kind} '{name}'"
        values = dict(values or {})
        if schema is None:
            if values:
                raise ConfigError(f"{where}: it takes no options (got {', '.join(values)})")
            return None
        ranges = {f.name: f.metadata["range"] for f in dataclasses.fields(schema)
                  if "range" in f.metadata}
        checked = check(model_of(schema, ranges, f"{name} options"), values, where)
        return schema(**{f.name: getattr(checked, f.name) for f in dataclasses.fields(schema)})

    def values(self, name: str, values: Mapping[str, Any] | None) -> dict[str, Any]:
        """``values`` checked as ``options`` checks them, as a plain dict for a stage's key,
        importing entry ``name`` only when there are values to check: for an entry whose
        module is heavy to import (a fusion mode, a counter backend), so that planning a
        build does not load it; the stage makes the Options with ``options`` when it runs."""
        values = dict(values or {})
        if values:
            self.options(name, values)
        return values

    def call(self, name: str, options: Any, *args: Any) -> Any:
        """Entry ``name`` called on ``args``, with ``options=`` where it declares Options
        (``options``: what ``self.options`` returned; None: the entry's defaults)."""
        entry = self.get(name)
        return entry(*args) if options is None else entry(*args, options=options)


def options_of(entry: Any) -> type | None:
    """An entry's ``Options`` dataclass: on the entry, else in the module defining it."""
    schema = getattr(entry, "Options", None)
    if schema is None and not isinstance(entry, ModuleType):
        module = importlib.import_module(getattr(entry, "__module__", "builtins"))
        schema = getattr(module, "Options", None)
    return schema if dataclasses.is_dataclass(schema) else None


def _load(path: str) -> Any:
    module, _, attribute = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attribute.split(".") if attribute else []:
        obj = getattr(obj, part)
    return obj


