"""The content-addressed artifact store and the run manifest (docs/design.md §2).

An artifact's key hashes the keys of the artifacts it reads, the stage's own config slice and
the pimbuild version. A stage writes into a private temporary folder that is renamed to
``<store>/<stage>/<key>/`` only when complete, so an interrupted or failed build leaves nothing
half-written, and two processes building the same key cannot corrupt it.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import platform
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from pimbuild import __version__

KEY_LENGTH = 16
COMPLETE = ".complete"  # written last, inside the temporary folder, before the rename


@functools.cache
def code_version() -> str:
    """``<version>+<digest>``: the release and a digest of pimbuild's own code (the package,
    its task graph and recipes, the marker runtime), so an artifact is never reused across
    code edits. The task graph and recipes live in their own folders in the source tree."""
    roots = {Path(loc) for name in ("pimbuild", "pimbuild.tasks", "pimbuild.recipes")
             for loc in importlib.util.find_spec(name).submodule_search_locations}
    files = sorted({f for root in roots for pattern in ("*.py", "*.c")
                    for f in root.rglob(pattern)})
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return f"{__version__}+{h.hexdigest()[:12]}"


def artifact_key(stage: str, params: dict[str, Any], inputs: dict[str, str]) -> str:
    """Hash of the stage name, its config slice, its input artifact keys and the version."""
    payload = json.dumps({"stage": stage, "params": params, "inputs": inputs,
                          "version": code_version()}, sort_keys=True, default=str)
    return hashlib.sha256(payload.encode()).hexdigest()[:KEY_LENGTH]


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class Artifact:
    stage: str
    key: str
    dir: Path

    @property
    def complete(self) -> bool:
        return (self.dir / COMPLETE).is_file()

    def files(self) -> dict[str, str]:
        """sha256 of every file of the artifact, by path relative to its folder."""
        return {str(p.relative_to(self.dir)): sha256_file(p)
                for p in sorted(self.dir.rglob("*")) if p.is_file() and p.name != COMPLETE}


class Store:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def artifact(self, stage: str, key: str) -> Artifact:
        return Artifact(stage, key, self.root / stage / key)

    def build(self, artifact: Artifact, produce: Callable[[Path], None]) -> bool:
        """Run ``produce(tmp_dir)`` and publish its output atomically as ``artifact``.

        Returns False when the artifact already existed (nothing was run)."""
        if artifact.complete:
            return False
        artifact.dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{artifact.key}-", dir=artifact.dir.parent))
        try:
            produce(tmp)
            (tmp / COMPLETE).write_text("")
            try:
                os.rename(tmp, artifact.dir)
            except OSError:
                if not artifact.complete:  # not a concurrent build of the same key
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return True


def run_cache(store: Store, name: str, content: dict[str, Any], out: Path,
              produce: Callable[[Path], None]) -> bool:
    """Fill ``out`` from ``<store>/.runcache/<name>/<hash of content>`` when an earlier build
    produced it from the same content (DVC's run cache), else produce it and remember it.
    For stages whose key is finer than what they depend on (reinsert depends on which nests
    are offloaded, not on the theta that chose them). Returns True on a cache hit."""
    cached = store.artifact(f".runcache/{name}", artifact_key(name, content, {}))
    if not cached.complete:
        store.build(cached, produce)
    for src in cached.dir.iterdir():
        if src.is_file() and src.name != COMPLETE:
            shutil.copy2(src, out / src.name)
    return True


def tool_versions() -> dict[str, str]:
    versions = {"pimbuild": code_version(), "python": platform.python_version()}
    for dist in ("torch", "torch-mlir", "hydra-core", "omegaconf", "doit", "numpy",
                 "matplotlib"):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def write_manifest(path: Path, artifacts: list[Artifact]) -> dict[str, Any]:
    """``{"stages": {stage: {key, dir, files}}, "versions": {...}}``, written atomically."""
    manifest = {
        "stages": {a.stage: {"key": a.key, "dir": str(a.dir), "files": a.files()}
                   for a in artifacts},
        "versions": tool_versions(),
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, path)
    return manifest
