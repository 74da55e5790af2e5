"""Run the partitioned program for real: one process per device over ``torch.distributed``
(gloo on CPUs; NCCL would take its place on GPUs), each executing only its own kernels
(FluidGPU's GPU workers, §III-C).

Every worker starts with the parameters (replicated, as the paper does) and, for every other
buffer, stale memory: zeros. The home worker also holds the forward's inputs. A worker sends a
buffer right after the kernel that writes it (non-blocking), to every device the transfer list
says reads it, and receives a buffer (blocking) before the first of its kernels that reads it;
results travel home. Only the transfers the dependency graph lists happen, so a missing edge
leaves a reader with stale zeros and the check against eager fails. Every worker follows
program order and sends never wait, so the exchange cannot deadlock.
"""

from __future__ import annotations

import datetime
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from pimbuild.core.errors import StageError

HOME = 0
TIMEOUT = datetime.timedelta(seconds=600)


def _bytes_view(a: np.ndarray):
    import torch

    return torch.from_numpy(a.reshape(-1).view(np.uint8))


def _load(llvm_path: str, compiled: tuple[str, str] | None):
    """The kernels: the object file the parent compiled (``compiled``: its path and the C
    compiler that links it), else ``llvm_path`` compiled here."""
    from pimbuild.codegen import jit

    if compiled is not None:
        return jit.load_object(Path(compiled[0]), [], compiled[1])
    return jit.load_llvm(Path(llvm_path), {})


def _worker(rank: int, world: int, init_file: str, llvm_path: str,
            compiled: tuple[str, str] | None, specs: list[dict],
            place: list[int], transfers: list[tuple[str, int, int, int]],
            buffers: dict[str, tuple[list[int], str]], args: dict[str, np.ndarray],
            inputs: set[str], outputs: list[str], result_path: str) -> None:
    import torch
    import torch.distributed as dist

    from pimbuild.codegen import jit

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world, timeout=TIMEOUT)
    engine = _load(llvm_path, compiled)
    table = {b: np.zeros(shape, dtype=jit.NP_DTYPES[dtype])
             for b, (shape, dtype) in buffers.items()}
    table.update({b: a for b, a in args.items() if b not in inputs or rank == HOME})
    tags = {b: i for i, b in enumerate(sorted(buffers))}
    incoming = {b: src for b, src, dst, _ in transfers if dst == rank}
    outgoing: dict[str, list[int]] = {}
    for b, src, dst, _ in transfers:
        if src == rank:
            outgoing.setdefault(b, []).append(dst)
    pending = []

    def send(b: str) -> None:
        for dst in outgoing.get(b, ()):
            pending.append(dist.isend(_bytes_view(table[b]), dst, tag=tags[b]))

    def receive(b: str) -> None:
        if b in incoming:
            dist.recv(_bytes_view(table[b]), incoming.pop(b), tag=tags[b])

    for b in inputs:
        send(b)
    for spec in specs:
        if place[spec["id"]] != rank:
            continue
        for b in spec["args"]:
            receive(b)
        results = jit.invoke(engine, spec["function"], [table[b] for b in spec["args"]],
                             spec["outputs"])
        for b, value in zip(spec["results"], results, strict=True):
            table[b] = value
            send(b)
    for b in outputs:
        receive(b)
    for request in pending:
        request.wait()
    if rank == HOME:
        np.savez(result_path, *[table[b] for b in outputs])
    dist.destroy_process_group()


def run(llvm_path: Path, specs: list[dict], place: list[int],
        transfers: list[tuple[str, int, int, int]], buffers: dict[str, tuple[list[int], str]],
        args: dict[str, np.ndarray], inputs: set[str], outputs: list[str],
        n_dev: int, compiled: tuple[Path, str] | None = None) -> list[np.ndarray]:
    """The forward's results as the home worker holds them after the distributed run.
    ``compiled``: the kernels' object file and the C compiler that links it, so that no
    worker compiles ``llvm_path`` again."""
    import torch.multiprocessing as mp

    unsent = unsent_transfers(specs, place, transfers, inputs)
    if unsent:  # a worker would wait for it until TIMEOUT
        b, src, dst, _ = unsent[0]
        raise StageError("reinsert", f"{len(unsent)} transfer(s) that no worker sends, e.g. "
                                     f"{b} from device {src} to {dst}: nothing on device {src} "
                                     f"writes it and it is not an input at home")
    with tempfile.TemporaryDirectory(prefix="pimbuild-workers-") as tmp:
        init_file = os.path.join(tmp, "rendezvous")
        result_path = os.path.join(tmp, "outputs.npz")
        try:
            shared = (str(compiled[0]), compiled[1]) if compiled else None
            mp.start_processes(_worker, args=(n_dev, init_file, str(llvm_path), shared, specs,
                                              place, transfers, buffers, args, inputs,
                                              outputs, result_path),
                               nprocs=n_dev, join=True, start_method="fork")
        except Exception as e:  # a worker raised or died: one line, the worker's own words
            lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
            raise StageError("reinsert", f"a device worker failed: "
                                         f"{lines[-1] if lines else type(e).__name__}") from None
        with np.load(result_path) as found:
            return [found[f"arr_{i}"] for i in range(len(outputs))]


def unsent_transfers(specs: list[dict], place: list[int],
                     transfers: list[tuple[str, int, int, int]], inputs: set[str]) -> list:
    """The transfers whose source worker never sends their buffer: a worker sends what its
    own kernels write and, at home, the inputs (``_worker``); any other would leave its
    receiver waiting."""
    written = {(b, place[spec["id"]]) for spec in specs for b in spec["results"]}
    return [t for t in transfers
            if (t[0], t[1]) not in written and not (t[0] in inputs and t[1] == HOME)]


def buffer_table(specs: list[dict], signature: dict[str, Any]) -> dict[str, tuple[list, str]]:
    """Shape and dtype of every buffer: the function's arguments and every kernel result."""
    table = {f"arg{i}": (a["shape"], a["dtype"]) for i, a in enumerate(signature["args"])}
    for spec in specs:
        for b, o in zip(spec["results"], spec["outputs"], strict=True):
            table[b] = (o["shape"], o["dtype"])
    return table
