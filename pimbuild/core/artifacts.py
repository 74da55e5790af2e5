"""The content-addressed artifact store and the run manifest (docs/design.md §2).

An artifact's key hashes the keys of the artifacts it reads, the stage's Params and the
pimbuild version. A stage writes into a private temporary folder that is renamed to
``<store>/<stage>/<key>/`` only when complete, with a marker that records every file's size,
modification time and hash; before an artifact is reused its files are checked against that
record, and a damaged one is rebuilt. Two processes that need the same key build it once
(a lock per key), and the folders of a process that died mid-build are swept away.
"""

from __future__ import annotations

import contextlib
import fcntl
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
    code edits. Each file enters under its package-qualified name
    (``pimbuild.build/graph.py``; the config tree, ``pimbuild/conf/`` in the source tree, as
    ``pimbuild.conf``), so the same code gives the same digest installed in place (editable)
    or copied into site-packages."""
    packages = ("pimbuild", "pimbuild.build", "pimbuild.recipes", "pimbuild.conf")
    roots = sorted(((Path(loc), name) for name in packages
                    for loc in importlib.util.find_spec(name).submodule_search_locations),
                   key=lambda r: len(r[0].parts), reverse=True)  # innermost root first
    names: dict[Path, str] = {}  # a file takes the name of the innermost root holding it
    for root, name in roots:
        for pattern in ("*.py", "*.c"):
            for f in root.rglob(pattern):
                names.setdefault(f, f"{name}/{f.relative_to(root).as_posix()}")
    h = hashlib.sha256()
    for f, qualified in sorted(names.items(), key=lambda item: item[1]):
        h.update(qualified.encode())
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
    """A published artifact: ``<store>/<stage>/<key>/``, its files and, last, the marker
    ``.complete`` that records each file's size, modification time and sha256."""

    stage: str
    key: str
    dir: Path

    @property
    def marker(self) -> Path:
        return self.dir / COMPLETE

    @property
    def complete(self) -> bool:
        """Published and intact (the fast check: see ``problem``)."""
        return self.problem() is None

    def _marker(self) -> dict[str, Any]:
        try:
            marker = json.loads(self.marker.read_text())
            return marker if isinstance(marker, dict) else {}
        except (OSError, ValueError):
            return {}

    def records(self) -> dict[str, dict[str, Any]]:
        """What the marker recorded at publication: file -> {size, mtime_ns, sha256}."""
        return self._marker().get("files") or {}

    def digest(self) -> str:
        """A hash of the artifact's content (its files' hashes, as recorded)."""
        return hashlib.sha256(json.dumps(self.files(), sort_keys=True).encode()).hexdigest()

    def problem(self, full: bool = False, inputs: tuple[Artifact, ...] = ()) -> str | None:
        """Why the artifact cannot be reused, or None. A file whose size or modification time
        differs from the record is hashed (``full``: every file is) and must match it; an
        input whose content differs from the one it was built from (a measurement repaired
        since) makes it stale."""
        if not self.marker.is_file():
            return "not published" if not self.dir.exists() else "no completion marker"
        marker = self._marker()
        records = marker.get("files") or {}
        if not records:
            return "completion marker without file records"
        for name, rec in records.items():
            path = self.dir / name
            try:
                st = path.stat()
            except OSError:
                return f"{name} is missing"
            if st.st_size != rec["size"]:
                return f"{name} changed size"
            if (full or st.st_mtime_ns != rec["mtime_ns"]) and sha256_file(path) != rec["sha256"]:
                return f"{name} was modified"
        built_from = marker.get("inputs") or {}
        for a in inputs:
            if built_from.get(a.stage) != a.digest():
                return f"its input {a.stage} changed since it was built"
        return None

    def files(self) -> dict[str, str]:
        """sha256 of every file of the artifact, by path relative to its folder."""
        return {name: rec["sha256"] for name, rec in sorted(self.records().items())}


def _records(folder: Path) -> dict[str, dict[str, Any]]:
    records = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and p.name != COMPLETE:
            st = p.stat()
            records[str(p.relative_to(folder))] = {
                "size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha256_file(p)}
    return records


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Store:
    """The content-addressed store. ``build`` publishes an artifact under a lock per key
    (another process that needs the same artifact waits and reuses it), through a temporary
    folder named after the building process, so that folders left by a dead process are
    recognised and removed (``sweep``)."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def artifact(self, stage: str, key: str) -> Artifact:
        return Artifact(stage, key, self.root / stage / key)

    def sweep(self) -> list[Path]:
        """Remove the temporary folders of processes that no longer run; returns them."""
        removed = []
        for tmp in self.root.glob("**/.tmp-*"):
            parts = tmp.name.split("-")
            pid = int(parts[2]) if len(parts) >= 4 and parts[2].isdigit() else None
            if tmp.is_dir() and (pid is None or not _alive(pid)):
                shutil.rmtree(tmp, ignore_errors=True)
                removed.append(tmp)
        return removed

    @contextlib.contextmanager
    def lock(self, artifact: Artifact):
        """Hold the artifact's key: one process at a time builds it."""
        artifact.dir.parent.mkdir(parents=True, exist_ok=True)
        locks = self.root / ".locks"
        locks.mkdir(exist_ok=True)
        name = f"{artifact.stage.replace('/', '_')}-{artifact.key}.lock"
        with (locks / name).open("a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def build(self, artifact: Artifact, produce: Callable[[Path], None],
              full: bool = False, inputs: tuple[Artifact, ...] = ()) -> str:
        """Publish ``produce(tmp_dir)``'s output as ``artifact`` unless it is there and
        intact. Returns ``"reused"``, ``"built"`` or ``"repaired: <why>"`` (a damaged or
        half-published artifact was replaced). ``full``: hash every file to check it."""
        with self.lock(artifact):
            problem = artifact.problem(full, inputs)
            if problem is None:
                return "reused"
            tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{artifact.key}-{os.getpid()}-",
                                        dir=artifact.dir.parent))
            try:
                produce(tmp)
                marker = {"files": _records(tmp), "inputs": {a.stage: a.digest() for a in inputs}}
                (tmp / COMPLETE).write_text(json.dumps(marker) + "\n")
                if artifact.dir.exists():
                    shutil.rmtree(artifact.dir)
                os.rename(tmp, artifact.dir)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        return "built" if problem == "not published" else f"repaired: {problem}"


def run_cache(store: Store, name: str, content: dict[str, Any], out: Path,
              produce: Callable[[Path], None]) -> bool:
    """Fill ``out`` from ``<store>/.runcache/<name>/<hash of content>`` when an earlier build
    produced it from the same content (DVC's run cache), else produce it and remember it.
    For stages whose key is finer than what they depend on (reinsert depends on which nests
    are offloaded, not on the theta that chose them). Returns True on a cache hit."""
    cached = store.artifact(f".runcache/{name}", artifact_key(name, content, {}))
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
