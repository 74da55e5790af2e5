"""The package's import structure: the contracts in pyproject.toml's ``[tool.importlinter]``
hold (no import cycles among pimbuild's modules and packages), and a function-level import of
a pimbuild module is there only to defer a heavy library (torch, torch-mlir, matplotlib,
LightGBM, SciPy), never to dodge a cycle."""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

import pimbuild

ROOT = Path(pimbuild.__file__).parent
HEAVY = {"torch", "torch_mlir", "matplotlib", "lightgbm", "scipy"}


def test_import_contracts_hold() -> None:
    """import-linter (a test dependency, pyproject's [test]) in a process of its own: its
    graph builder's threads would change how this process's allocator reuses memory, which
    the profile tests measure."""
    pyproject = ROOT.parent / "pyproject.toml"
    code = ("from importlinter.cli import lint_imports\n"
            f"raise SystemExit(lint_imports(config_filename={str(pyproject)!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT.parent)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = ["pimbuild", *path.relative_to(ROOT).with_suffix("").parts]
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _module_level_imports(path: Path) -> set[str]:
    """What a module imports when it is imported (not under TYPE_CHECKING, not in functions)."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for s in body:
            if isinstance(s, ast.Import):
                found.update(a.name for a in s.names)
            elif isinstance(s, ast.ImportFrom) and s.module and not s.level:
                found.add(s.module)
                found.update(f"{s.module}.{a.name}" for a in s.names)
            elif isinstance(s, ast.If) and "TYPE_CHECKING" not in ast.unparse(s.test):
                visit(s.body)
                visit(s.orelse)
            elif isinstance(s, ast.Try):
                visit(s.body)
                for h in s.handlers:
                    visit(h.body)

    visit(ast.parse(path.read_text()).body)
    return found


@cache
def _heavy(module: str, seen: frozenset[str] = frozenset()) -> bool:
    """Whether importing ``module`` imports a heavy library (through module-level imports)."""
    if module.split(".")[0] in HEAVY:
        return True
    if module not in MODULES or module in seen:
        return False
    seen = seen | {module}
    parent = module.rsplit(".", 1)[0]
    return (any(_heavy(m, seen) for m in _module_level_imports(MODULES[module]))
            or (parent != module and parent in MODULES and _heavy(parent, seen)))


def _function_level_imports() -> list[tuple[str, int, str]]:
    out = []
    for path in MODULES.values():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.ImportFrom) and (sub.module or "").startswith("pimbuild"):
                    names = [f"{sub.module}.{a.name}" for a in sub.names]
                    out += [(str(path.relative_to(ROOT)), sub.lineno,
                             n if n in MODULES else sub.module) for n in names]
                elif isinstance(sub, ast.Import):
                    out += [(str(path.relative_to(ROOT)), sub.lineno, a.name)
                            for a in sub.names if a.name.startswith("pimbuild")]
    return out


def test_function_level_imports_only_defer_heavy_libraries() -> None:
    found = _function_level_imports()
    assert found, "the walk found no function-level imports at all: it is broken"
    light = sorted({(f, line, m) for f, line, m in found if not _heavy(m)})
    assert not light, "function-level imports of modules that load no heavy library " \
                      f"(import them at the top): {light}"


def test_the_heaviness_walk_sees_heavy_and_light_modules() -> None:
    # torch-mlir, torch; the frontend package itself imports its modules on first use
    assert _heavy("pimbuild.codegen.jit") and _heavy("pimbuild.frontend.exported")
    assert not _heavy("pimbuild.frontend")
    assert not _heavy("pimbuild.core.errors") and not _heavy("pimbuild.core.registry")


def test_every_package_is_installed() -> None:
    """setuptools finds every package of the source tree by pyproject's pattern (a package it
    missed would install in editable mode and go missing from a plain ``pip install``)."""
    import tomllib

    from setuptools import find_packages

    found = {".".join(("pimbuild", *p.parent.relative_to(ROOT).parts))
             for p in ROOT.rglob("__init__.py") if "__pycache__" not in p.parts}
    include = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())[
        "tool"]["setuptools"]["packages"]["find"]["include"]
    assert set(find_packages(where=ROOT.parent, include=include)) == found
    assert "pimbuild.conf" in found  # the config tree ships as a package

def test_top_level_holds_only_packages() -> None:
    """Every module lives in its layer's package: at the top of ``pimbuild/`` only
    ``__init__.py`` and packages (core, frontend, codegen, targets, build, paper, commands,
    recipes, the config tree)."""
    loose = sorted(p.name for p in ROOT.glob("*.py") if p.name != "__init__.py")
    assert loose == []
    assert all((p / "__init__.py").exists() for p in ROOT.iterdir()
               if p.is_dir() and p.name != "__pycache__")
