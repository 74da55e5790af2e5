"""The data dependency graph: kernels, the buffers they pass, and what a placement moves.

FluidGPU's kernel analyzer keeps a registry of the last writer of every buffer and adds an edge
writer -> reader when a kernel reads it (read-after-write only: disaggregation keeps program
order). ``edges`` does the same over the buffers extract recorded, statically. Parameters are
replicated on every device (the paper replicates the weights); the function's inputs and its
results live on the *home* device (device 0, where requests enter), except what the recipe
declares: a result *carried* to the next layer's readers of an input (``Recipe.carry``, the
hidden state of a stack of ``layers > 1`` identical layers) and a result that is the *state*
the same layer's next forward reads (``Recipe.state``: the new keys and values appended to
every KV-cache replica, a recurrent state): FluidGPU's cross-iteration dependencies. A
model that keeps its state in a module buffer and writes it in place needs to declare
nothing: torch.export's functionalization returns the buffer's new value as a result, and
the frontend records it as state (``frontend.mutation_layout``); a model that passes its
cache as inputs and outputs declares the pairs in its recipe.

A transfer is one buffer sent once to one device that reads it (``transfers``), not one per
reading kernel: the receiving worker keeps it for all its readers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

HOME = 0  # the device requests enter and results leave from


@dataclass(frozen=True)
class Kernel:
    id: int
    name: str  # module path and torch node, for people
    kind: str  # contraction | reduction | elementwise | copy | other
    flops: int
    reads: dict[str, int]  # buffer -> bytes (at the IR's element type)
    writes: dict[str, int]
    source_module: str = ""
    source_node: str = ""  # the FX node of the torch operator it came from


@dataclass(frozen=True)
class Edge:
    src: int  # writer kernel
    dst: int  # reader kernel
    buffer: str
    bytes: int


@dataclass(frozen=True)
class Graph:
    kernels: tuple[Kernel, ...]
    buffer_bytes: dict[str, int]  # bytes of every buffer a placement may move
    producer: dict[str, int]  # buffer -> the kernel that writes it last
    readers: dict[str, tuple[int, ...]]  # buffer -> kernels reading it (program order)
    inputs: tuple[str, ...]  # buffers that enter from the home device (or are carried)
    outputs: tuple[str, ...]  # buffers that must reach the home device
    carry: dict[str, str] = field(default_factory=dict)  # input buffer -> result feeding it
    state: frozenset[str] = frozenset()  # inputs of ``carry`` fed by the previous forward

    @property
    def edges(self) -> list[Edge]:
        return [Edge(self.producer[b], r, b, self.buffer_bytes[b])
                for b, rs in self.readers.items() if b in self.producer for r in rs
                if r != self.producer[b]]

    def source(self, buffer: str) -> int | None:
        """The kernel whose device holds ``buffer`` first; None: the home device."""
        if buffer in self.producer:
            return self.producer[buffer]
        if buffer in self.carry:
            return self.producer.get(self.carry[buffer])
        return None

    def predecessors(self, k: int) -> list[tuple[int | None, str]]:
        """(source kernel or None for home, buffer) of every buffer kernel ``k`` reads."""
        return [(self.source(b), b) for b in self.kernels[k].reads if b in self.buffer_bytes]


def build(data: dict[str, Any], layers: int = 1, float_scale: float = 1.0) -> Graph:
    """The graph of extract's ``kernels.json`` content; floating-point buffers' bytes are
    scaled by ``float_scale`` (the served precision's element size over the IR's).
    ``layers > 1``: the recipe's ``carry`` pairs apply; ``layers >= 1``: so do its ``state``
    pairs (the steady state of many forwards); ``layers = 0``: one isolated forward, every
    input from home."""
    floating = {b: info.get("float", False) for b, info in data["buffers"].items()}

    def scaled(sizes: dict[str, int]) -> dict[str, int]:
        return {b: round(n * float_scale) if floating.get(b) else n for b, n in sizes.items()}

    kernels = tuple(Kernel(k["id"], display(k), k["kind"], k["flops"], scaled(k["reads"]),
                           scaled(k["writes"]), k["source_module"], k.get("source_node", ""))
                    for k in data["kernels"])
    carried_in = set(data.get("state", {})) | set(data.get("carry", {}))
    params = {b for b, info in data["buffers"].items()  # every argument but the inputs:
              if (info.get("role") not in (None, "input")   # parameters, buffers, lifted
                  or b.startswith("const")) and b not in carried_in}  # constants, literals
    producer: dict[str, int] = {}
    readers: dict[str, list[int]] = {}
    for k in kernels:
        for b in k.reads:
            if b not in params:
                readers.setdefault(b, []).append(k.id)
        for b in k.writes:
            producer[b] = k.id
    outputs = tuple(b for b in data["outputs"] if b)
    state = dict(data.get("state", {})) if layers > 0 else {}
    carry = {**(dict(data.get("carry", {})) if layers > 1 else {}), **state}
    # what enters from home: the inputs, and a state or carried buffer not fed by a result
    # here (one isolated forward, layers = 0: the KV cache it was given)
    inputs = tuple(b for b, info in data["buffers"].items()
                   if info.get("role") == "input" or (b in carried_in and b not in carry))
    sizes = scaled({b: info["bytes"] for b, info in data["buffers"].items() if b not in params})
    return Graph(kernels, sizes, producer, {b: tuple(r) for b, r in readers.items()},
                 inputs, tuple(o for o in outputs if o not in carry.values()), carry,
                 frozenset(state))


def display(k: dict[str, Any]) -> str:
    node = k.get("source_node") or k["op"]
    return f"{k['source_module']}.{node}" if k.get("source_module") else node


def transfers(g: Graph, place: list[int]) -> list[tuple[str, int, int, int]]:
    """(buffer, from device, to device, bytes) of every buffer a placement moves, once per
    receiving device."""
    moved = []
    for b, size in g.buffer_bytes.items():
        src = g.source(b)
        src_dev = HOME if src is None else place[src]
        dests = {place[r] for r in g.readers.get(b, ())}
        if b in g.outputs:
            dests.add(HOME)
        moved += [(b, src_dev, d, size) for d in sorted(dests) if d != src_dev]
    return moved


def rename(b: str, i: int) -> str:
    """Copy ``i``'s name of buffer ``b`` in an unrolled graph (``unroll``)."""
    return f"L{i}:{b}"


def unroll(g: Graph, layers: int) -> Graph:
    """``layers`` copies of a one-layer graph in one graph (the model, or a period of it, as
    one DDG): kernel ``k`` of copy ``i`` is ``k + i * len(g.kernels)``; each copy's carried
    inputs read from the previous copy's results (the first copy's from the last copy's: the
    next period's layers follow), each copy's state (``g.state``) from its own result of the
    previous forward, and each copy's results travel home."""
    n = len(g.kernels)

    def own(b: str) -> bool:  # a buffer every copy has its own of
        return b in g.producer or b in g.state

    kernels, sizes, producer, readers = [], {}, {}, {}
    for i in range(layers):
        for k in g.kernels:
            reads = {}
            for b, size in k.reads.items():
                if b in g.carry and b not in g.state and i > 0:
                    reads[rename(g.carry[b], i - 1)] = size
                elif b in g.buffer_bytes and (own(b) or b in g.carry):
                    reads[rename(b, i)] = size
                else:
                    reads[b] = size  # parameters and home inputs are shared
            writes = {rename(b, i): s for b, s in k.writes.items()}
            kernels.append(Kernel(k.id + i * n, k.name, k.kind, k.flops, reads, writes,
                                  k.source_module, k.source_node))
    for b, size in g.buffer_bytes.items():
        if own(b):
            for i in range(layers):
                sizes[rename(b, i)] = size
        elif b in g.carry:
            sizes[rename(b, 0)] = size
        else:
            sizes[b] = size
    for k in kernels:
        for b in k.reads:
            if b in sizes:
                readers.setdefault(b, []).append(k.id)
        for b in k.writes:
            producer[b] = k.id
    carry = {rename(b, 0): rename(o, layers - 1) for b, o in g.carry.items()
             if b not in g.state}
    carry |= {rename(b, i): rename(g.carry[b], i) for b in g.state for i in range(layers)}
    state = frozenset(rename(b, i) for b in g.state for i in range(layers))
    inputs = tuple(c for b in g.inputs for c in (
        [rename(b, i) for i in range(layers)] if b in g.state
        else [rename(b, 0)] if b in g.carry else [b]))
    outputs = tuple(dict.fromkeys(rename(o, i) if own(o) else o
                                  for i in range(layers) for o in g.outputs))
    return Graph(tuple(kernels), sizes, producer, {b: tuple(r) for b, r in readers.items()},
                 inputs, outputs, carry, state)
