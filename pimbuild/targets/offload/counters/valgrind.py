"""Counter backend ``valgrind``: per-nest cache-simulation counts from callgrind.

The instrumented LLVM-dialect module is compiled for ``x86-64-v3`` without AVX-512 (valgrind
3.19 cannot decode AVX-512) and without FMA (valgrind runs every FMA instruction through a
helper call: a LLaMA-7B layer's forward took 10 s under ``--tool=none`` with FMA and 0.3 s
without; the loads and stores, hence the cache counts, are the same), linked with a
generated C driver and the callgrind build of the marker runtime, and run once under
``valgrind --tool=callgrind --cache-sim=yes --instr-atstart=no --collect-atstart=no`` with
the platform's cache sizes: the driver maps the inputs and switches instrumentation on just
before the forward, so only the forward is simulated, from cold caches. The markers switch
collection on at each region's entry and off at its exit (the caches are simulated
throughout), and dump the counts as the region's when another region starts or the forward
ends: every dump holds the invocations of one nest in a row (one, for a nest outside any
loop), and attribution is exact. A dump per invocation made the column norms of 262144 x 4
values (a nest inside the loop over the rows) take 207 s in callgrind.

Roles reported: ``offcore_data_rd`` = last-level data read misses (DLmr), so
``n_rd * L`` is the bytes a nest read past the simulated last level: the LLC, or with
``profile.valgrind_last_level=l2`` the core's L2 (the meaning of the paper's
OFFCORE_REQUESTS.ALL_DATA_RD, whose count includes L3 hits); ``ll_write_misses`` = DLmw.
With ``profile.valgrind_warm=true`` the counted forward is the second of two, in the cache
state the first leaves (a model served again and again), not one after a flush. Callgrind
has no store-bound cycles; the profile stage derives the store side as the proxy
``store_bound = (DLmw * L / T_cpu) / B_cpu``: the nest's write-back bandwidth as a fraction
of the host's streaming bandwidth, i.e. the share of its time that streaming its written
lines to memory would take.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from torch_mlir import ir

from pimbuild.codegen import jit
from pimbuild.codegen.runtime import CALLGRIND_LIBRARY, LIBRARY, MALLOPT, Markers
from pimbuild.core.errors import StageError
from pimbuild.frontend import mlir
from pimbuild.targets.offload.counters import CounterRun
from pimbuild.targets.offload.instrument import ENTER, EXIT

if TYPE_CHECKING:
    from pimbuild.targets.offload.program import Params, Program

TARGET_CPU = "x86-64-v3"
TARGET_FEATURES = "#llvm.target_features<[\"-avx512f\", \"-fma\"]>"
DUMP_RE = re.compile(r"^desc: Trigger: Client Request: region (\d+)$", re.M)


def available(run: CounterRun | None = None) -> tuple[bool, str]:
    path = shutil.which("valgrind")
    return (True, f"valgrind found at {path}") if path else (False, "valgrind not found")


def compile_portable_object(llvm_path: Path, symbols: dict, out: Path) -> Path:
    """The instrumented module as an object file for x86-64-v3, AVX-512 disabled."""
    module = mlir.parse_file(llvm_path)
    cpu = ir.StringAttr.get(TARGET_CPU, module.context)
    features = ir.Attribute.parse(TARGET_FEATURES, module.context)
    for op in module.body.operations:
        op = op.operation
        if op.name == "llvm.func" and len(op.regions[0].blocks) > 0:
            op.attributes["target_cpu"] = cpu
            op.attributes["target_features"] = features
    jit.write_object(module, symbols, out)
    return out


def _memref_struct(rank: int) -> str:
    dims = f"int64_t sizes[{rank}]; int64_t strides[{rank}];" if rank else ""
    return f"typedef struct {{ void *allocated, *aligned; int64_t offset; {dims} }} memref{rank};"


ARG_ALIGN = 64  # each argument starts at a multiple of this in inputs.bin


def arg_offsets(signature: dict) -> list[int]:
    """Byte offset of each argument in ``inputs.bin`` (each padded to ``ARG_ALIGN``)."""
    offsets, at = [], 0
    for a in signature["args"]:
        offsets.append(at)
        nbytes = math.prod(a["shape"]) * np.dtype(a["dtype"]).itemsize
        at += -(-nbytes // ARG_ALIGN) * ARG_ALIGN
    return offsets


def driver_source(signature: dict, warm: bool = False, reuse: bool = False) -> str:
    """A C ``main`` that maps the arguments from a file (no copy: pages arrive as the forward
    touches them), switches callgrind's instrumentation on, and calls the lowered function
    once. Valgrind runs with ``--instr-atstart=no``, so nothing before the forward is
    simulated: the counted forward starts with empty (cold) simulated caches, and setting up
    its inputs costs native speed. ``warm``: it calls the function twice, and the second
    forward is the one counted (``count`` keeps the later half of the dumps), in the cache
    state one forward leaves; with ``reuse`` (``profile.reuse_memory``) glibc keeps the
    blocks the first frees for the second, at the addresses the simulated caches hold, as
    in the steady state the timing run measures (``profile.reuse_freed_memory``)."""
    outputs = [(o["shape"], np.dtype(o["dtype"]).itemsize) for o in signature["outputs"]]
    shapes = [a["shape"] for a in signature["args"]] + [s for s, _ in outputs]
    ranks = sorted({len(shape) for shape in shapes})
    lines = ["#include <fcntl.h>", "#include <malloc.h>", "#include <stdint.h>",
             "#include <stdio.h>", "#include <stdlib.h>", "#include <sys/mman.h>",
             "#include <sys/stat.h>", "#include <valgrind/callgrind.h>",
             *[_memref_struct(r) for r in ranks]]
    params = ", ".join(f"memref{len(s)} *" for s in shapes)
    lines.append(f"void _mlir_ciface_{signature['function']}({params});")
    lines.append("void pim_callgrind_flush(void);")
    lines += ["int main(int argc, char **argv) {",
              *([f"  mallopt({name}, {value});" for name, _, value in MALLOPT]
                if warm and reuse else []),
              "  int fd = argc > 1 ? open(argv[1], O_RDONLY) : -1;",
              "  struct stat st;",
              "  if (fd < 0 || fstat(fd, &st) != 0) { perror(\"inputs\"); return 2; }",
              "  char *base = st.st_size ? mmap(NULL, st.st_size, PROT_READ | PROT_WRITE,",
              "                                 MAP_PRIVATE, fd, 0) : NULL;",
              "  if (base == MAP_FAILED) { perror(\"mmap\"); return 2; }"]
    offsets = arg_offsets(signature)
    for i, shape in enumerate(shapes):
        if i < len(offsets):
            lines.append(f"  void *b{i} = base + {offsets[i]};")
        else:
            nbytes = math.prod(shape) * outputs[i - len(offsets)][1]
            lines.append(f"  void *b{i} = aligned_alloc(64, {-(-nbytes // 64) * 64 or 64}u);")
        strides = [math.prod(shape[k + 1:]) for k in range(len(shape))]
        init = ", ".join(map(str, [*shape, *strides]))
        lines.append(f"  memref{len(shape)} m{i} = {{b{i}, b{i}, 0{', ' if init else ''}"
                     f"{init}}};")
    call_args = ", ".join(f"&m{i}" for i in range(len(shapes)))
    lines += ["  CALLGRIND_START_INSTRUMENTATION;",
              *[f"  _mlir_ciface_{signature['function']}({call_args});\n"
                f"  pim_callgrind_flush();"] * (2 if warm else 1),
              "  return 0;", "}"]
    return "\n".join(lines) + "\n"


def inputs_path(work: Path, nbytes: int) -> Path:
    """Where the driver's inputs go: a file in ``/dev/shm`` (memory) when it has room for
    twice their size, else beside the driver (a model's weights can be GBs: no disk
    round trip when memory allows)."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK) and shutil.disk_usage(shm).free > 2 * nbytes:
        fd, name = tempfile.mkstemp(prefix="pimbuild-inputs-", suffix=".bin", dir=shm)
        os.close(fd)
        return Path(name)
    return work / "inputs.bin"


def write_inputs(args: list[np.ndarray], path: Path, signature: dict) -> None:
    """The arguments at ``arg_offsets`` (zero padding between them)."""
    with path.open("wb") as f:
        for a, offset in zip(args, arg_offsets(signature), strict=True):
            f.seek(offset)
            np.ascontiguousarray(a).tofile(f)


def build_driver(inp: Program, p: Params, work: Path) -> Path:
    symbols = Markers(inp.runtime_dir / LIBRARY).symbols([ENTER, EXIT])
    obj = compile_portable_object(inp.llvm_path, symbols, work / "forward_x86-64-v3.o")
    (work / "driver.c").write_text(driver_source(inp.signature, p.valgrind_warm, p.reuse_memory))
    runtime = inp.runtime_dir / CALLGRIND_LIBRARY
    if not runtime.is_file():
        raise StageError("profile", "the marker runtime has no callgrind build "
                                    "(valgrind/callgrind.h was not found when it was built)")
    exe = work / "forward_driver"
    cmd = ["cc", "-O1", "-march=x86-64-v3", "-mno-avx512f", "-mno-fma", str(work / "driver.c"),
           str(obj),
           str(runtime), f"-Wl,-rpath,{inp.runtime_dir}", "-lm", "-o", str(exe)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise StageError("profile", f"linking the valgrind driver failed:\n{proc.stderr}",
                         repro=" ".join(cmd))
    return exe


def cache_options(p: Params) -> list[str]:
    """Callgrind simulates two levels: L1 and a last level, the LLC or (valgrind_last_level
    = l2) the core's L2, so that a last-level miss is a read that leaves the L2."""
    size, assoc = p.last_level
    return [f"--I1=32768,8,{p.cache_line}",
            f"--D1={p.l1d_bytes},{p.l1d_assoc},{p.cache_line}",
            f"--LL={size},{assoc},{p.cache_line}"]


def parse_dump(path: Path) -> tuple[int, dict[str, int]]:
    """(region id, event totals) of one callgrind dump triggered by ``region_exit``."""
    text = path.read_text()
    m = DUMP_RE.search(text)
    if not m:
        return -1, {}
    events = re.search(r"^events: (.+)$", text, re.M).group(1).split()
    totals = re.search(r"^(?:totals|summary): (.+)$", text, re.M).group(1).split()
    return int(m.group(1)), dict(zip(events, map(int, totals), strict=False))


def _dump_number(path: Path) -> int:
    """callgrind.out.<n>: dumps in the order callgrind wrote them."""
    tail = path.name.rsplit(".", 1)[-1].split("-")[0]
    return int(tail) if tail.isdigit() else -1


def count(run: CounterRun) -> list[dict]:
    inp, args, p = run.program, run.args, run.params
    work = run.out_dir / "valgrind"
    work.mkdir()
    exe = build_driver(inp, p, work)
    inputs = inputs_path(work, sum(a.nbytes for a in args) + ARG_ALIGN * len(args))
    try:
        write_inputs(args, inputs, inp.signature)
        cmd = ["valgrind", "--tool=callgrind", "--cache-sim=yes", "--instr-atstart=no",
               "--collect-atstart=no",
               *cache_options(p), f"--callgrind-out-file={work / 'callgrind.out'}", str(exe),
               str(inputs)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        inputs.unlink(missing_ok=True)
    (work / "valgrind.log").write_text(proc.stderr)
    if proc.returncode != 0:
        raise StageError("profile", f"valgrind failed (see {work / 'valgrind.log'}): "
                                    f"{proc.stderr.strip().splitlines()[-1:]}",
                         repro=" ".join(cmd))
    dumps = [parse_dump(d) for d in sorted(work.glob("callgrind.out.*"), key=_dump_number)]
    dumps = [(region, counts) for region, counts in dumps if region >= 0]
    if p.valgrind_warm:  # two identical forwards: the second half of the dumps is the 2nd
        dumps = dumps[len(dumps) // 2:]
    totals: dict[int, dict[str, int]] = {}
    for region, counts in dumps:
        acc = totals.setdefault(region, {})
        for k, v in counts.items():
            acc[k] = acc.get(k, 0) + v
    rows = []
    for c in inp.candidates:
        t = totals.get(c["id"], {})
        rows.append({"id": c["id"], "source_op": c["source_op"], "counter_source": "valgrind",
                     "counts": {"offcore_data_rd": t.get("DLmr", 0),
                                "ll_write_misses": t.get("DLmw", 0),
                                "instructions": t.get("Ir", 0),
                                "data_reads": t.get("Dr", 0), "data_writes": t.get("Dw", 0)}})
    return rows
