"""Stage ``runtime``: the marker runtime (``markers.c``), compiled with the system C compiler.

``run`` writes ``libpimmarkers.so`` (timing, plus PAPI counters when ``papi.h`` and
``libpapi`` are present) and, when valgrind's ``callgrind.h`` is present,
``libpimmarkers_callgrind.so``; ``runtime.json`` records the compiler, the commands and which
features each library has. ``Markers`` is the ctypes view of a loaded library.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from pimbuild.core.errors import StageError
from pimbuild.core.stage import Inputs

NAME = "runtime"
READS: tuple[str, ...] = ()
SOURCE = Path(__file__).with_name("markers.c")
LIBRARY = "libpimmarkers.so"
CALLGRIND_LIBRARY = "libpimmarkers_callgrind.so"
# profile.reuse_freed_memory's glibc mallopt settings: name (malloc.h), its parameter number,
# value (the valgrind driver sets the same ones in C)
MALLOPT = (("M_MMAP_MAX", -4, 0), ("M_TRIM_THRESHOLD", -1, -1), ("M_ARENA_MAX", -8, 1))
WRITES = (LIBRARY, "runtime.json")
CFLAGS = ("-O2", "-shared", "-fPIC", "-std=gnu11", "-Wall")


@dataclass(frozen=True)
class Params:
    """What the build depends on: the source, the compiler and the headers it finds (the
    runtime reads no configuration)."""

    source_sha256: str
    cc: str
    cc_version: str
    papi_h: bool
    callgrind_h: bool
    cflags: tuple[str, ...]


def params(cfg: DictConfig) -> Params:
    return probe()


def compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise StageError("runtime", "no C compiler found (set CC or install gcc)")
    return cc


def _has_header(cc: str, header: str) -> bool:
    proc = subprocess.run([cc, "-E", "-x", "c", "-"], input=f"#include <{header}>\n",
                          capture_output=True, text=True)
    return proc.returncode == 0


def probe() -> Params:
    """What the runtime build depends on: source, compiler version, available headers."""
    return _probe(compiler())


@functools.cache
def _probe(cc: str) -> Params:
    """``probe`` for compiler ``cc``, once a process: three runs of the compiler, 30 ms that
    every job of a sweep in one process would otherwise pay again."""
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    return Params(source_sha256=hashlib.sha256(SOURCE.read_bytes()).hexdigest(), cc=cc,
                  cc_version=version.splitlines()[0] if version else "",
                  papi_h=_has_header(cc, "papi.h"),
                  callgrind_h=_has_header(cc, "valgrind/callgrind.h"), cflags=CFLAGS)


def _compile(cc: str, out: Path, defines: list[str], libs: list[str]) -> list[str]:
    cmd = [cc, *CFLAGS, *defines, str(SOURCE), "-o", str(out), *libs]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise StageError("runtime", f"compiling the marker runtime failed:\n{proc.stderr}",
                         repro=" ".join(cmd))
    return cmd


def run(inputs: Inputs, p: Params, out: Path) -> None:
    build(out, p)


def build(out_dir: Path, p: Params | None = None) -> None:
    p = p or probe()
    commands = [_compile(p.cc, out_dir / LIBRARY, ["-DPIM_WITH_PAPI"] if p.papi_h else [],
                         ["-lpapi"] if p.papi_h else [])]
    if p.callgrind_h:
        commands.append(_compile(p.cc, out_dir / CALLGRIND_LIBRARY,
                                 ["-DPIM_WITH_CALLGRIND"], []))
    (out_dir / "runtime.json").write_text(json.dumps(
        {**asdict(p), "papi": p.papi_h, "callgrind": p.callgrind_h,
         "commands": [" ".join(c) for c in commands]}, indent=2) + "\n")


class Markers:
    """ctypes access to a loaded marker runtime's accumulators."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lib = ctypes.CDLL(str(path))
        for name in ("pim_counts", "pim_ns"):
            getattr(self.lib, name).restype = ctypes.POINTER(ctypes.c_uint64)
        self.lib.pim_values.restype = ctypes.POINTER(ctypes.c_longlong)
        self.lib.pim_papi_start.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
        self.lib.pim_papi_perf_event_status.restype = ctypes.c_char_p
        self.lib.pim_transitions.restype = ctypes.c_uint64
        self.max_regions = self.lib.pim_max_regions()
        self.max_events = self.lib.pim_max_events()

    def symbols(self, names: list[str]) -> dict[str, ctypes.c_void_p]:
        """Addresses of the named marker functions, for ``jit.load_llvm``."""
        return {name: ctypes.cast(getattr(self.lib, name), ctypes.c_void_p) for name in names}

    def transitions(self) -> int:
        """Host<->PIM transitions the hybrid program made since the last reset."""
        return int(self.lib.pim_transitions())

    def reset(self) -> None:
        self.lib.pim_reset()

    def counts(self, n: int) -> np.ndarray:
        return np.ctypeslib.as_array(self.lib.pim_counts(), (self.max_regions,))[:n].copy()

    def seconds(self, n: int) -> np.ndarray:
        return np.ctypeslib.as_array(self.lib.pim_ns(), (self.max_regions,))[:n] * 1e-9

    def values(self, n: int, n_events: int) -> np.ndarray:
        raw = np.ctypeslib.as_array(self.lib.pim_values(),
                                    (self.max_regions * self.max_events,))
        return raw.reshape(self.max_regions, self.max_events)[:n, :n_events].copy()

    def perf_event_status(self) -> str:
        return self.lib.pim_papi_perf_event_status().decode()

    def papi_start(self, events: list[str]) -> tuple[int, str]:
        """Start one event set; returns (number of events, "") or (-1, PAPI's reason)."""
        err = ctypes.create_string_buffer(512)
        n = self.lib.pim_papi_start(",".join(events).encode(), err, len(err))
        return n, err.value.decode()

    def papi_stop(self) -> None:
        self.lib.pim_papi_stop()
