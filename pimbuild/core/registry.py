"""Name -> implementation tables for the pluggable parts (xDSL's lazy registry; docs/design.md §4).

A registry finds an implementation, in this order, by
1. an explicit ``register(name)`` (a test, a plugin loaded by the user),
2. its built-in table (``name -> "module:attribute"``, imported on first use),
3. a module of its package named like the option (``<package>.<name>``), so a
   new policy, target or counter backend is one new file plus its YAML,
4. an import path ``"package.module:attribute"`` given as the name itself (code outside
   pimbuild).
Nothing is imported until an implementation is asked for.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from typing import Any

from pimbuild.core.errors import ConfigError


class Registry:
    def __init__(self, kind: str, option: str, *, package: str | None = None,
                 attribute: str | None = None, builtins: dict[str, str] | None = None,
                 exclude: tuple[str, ...] = ()) -> None:
        self.kind = kind  # "policy": what an entry is, for messages
        self.option = option  # "policy.name": the config option that names one
        self.package = package  # modules of this package are entries named like the module
        self.attribute = attribute  # the attribute of such a module (None: the module)
        self.builtins = dict(builtins or {})
        self.exclude = exclude  # modules of the package that are not entries
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
        found = [*self._registered, *self.builtins]
        if self.package:
            spec = importlib.util.find_spec(self.package)
            for info in pkgutil.iter_modules(spec.submodule_search_locations or []):
                if not info.name.startswith("_") and info.name not in self.exclude:
                    found.append(info.name)
        return sorted(set(found))

    def get(self, name: str) -> Any:
        if name in self._registered:
            return self._registered[name]
        if name in self.builtins:
            return _load(self.builtins[name])
        if self.package and name in self.names():
            module = importlib.import_module(f"{self.package}.{name}")
            return getattr(module, self.attribute) if self.attribute else module
        if ":" in name:
            try:
                return _load(name)
            except (ImportError, AttributeError) as e:
                raise ConfigError(f"{self.option} '{name}' cannot be loaded: {e}") from None
        raise ConfigError(f"unknown {self.kind} '{name}' ({self.option}); choose from: "
                          f"{', '.join(self.names())}, or give 'package.module:attribute'")

    def check(self, name: str) -> None:
        """Raise a ConfigError unless ``name`` names an entry (imports nothing for built-ins
        and modules of the package)."""
        if name in self._registered or name in self.builtins or (
                self.package and name in self.names()):
            return
        self.get(name)


def _load(path: str) -> Any:
    module, _, attribute = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attribute.split(".") if attribute else []:
        obj = getattr(obj, part)
    return obj


