"""Engine kernels: the lowered kernels (``pimbuild.targets.gpus.program.kernels``, one per linalg
op) grouped into the kernels a serving engine launches (``gpus.kernels=engine``; docs/gpus.md).

vLLM runs a Llama decoder layer as about ten kernels: a fused (add +) RMSNorm, one QKV GEMM,
RoPE, one attention kernel over the KV cache, the O projection, a fused add + RMSNorm, one
gate+up GEMM, SiLU-and-mul and the down projection. The lowered program runs the same
arithmetic as several times as many kernels. The groups, found on the data-dependency graph:

- **attention**: a contraction of two activations (``Q K^T``), the row kernels between it and
  a second contraction of two activations (``P V``: scale, mask, softmax), and the copies that
  build its keys and values from the cache; one ``prefill_attention`` op (causal over the last
  ``m`` of ``n`` positions) or ``decode_attention`` (``m`` = 1) over ``b`` sequences, ``h``
  query heads, ``g`` key/value heads, head dimension ``k``, with ``b`` and ``m`` read off the
  forward's first 3-d input (batch, tokens, hidden) and the rest from the operand sizes;
- **merged GEMMs**: contractions of one activation with different weights (q, k and v; gate
  and up): one ``linear`` op with the columns added;
- **row norms**: a row reduction with the elementwise kernels on its way in and the one that
  applies it (RMSNorm, LayerNorm), with the residual add before it when there is one (vLLM's
  fused add + RMSNorm): an ``rmsnorm`` (``add_rmsnorm``) op;
- **fused elementwise**: the remaining elementwise kernels and copies connected through their
  buffers and fed by the same group (RoPE on q and k after the QKV GEMM is one kernel):
  ``rope`` between a merged GEMM and attention, ``silu_mul`` for an activation of two
  streams, else the vector op of ``ops.from_kernel``.

Each engine kernel keeps its ``members`` (lowered kernel ids): the partitioned program still
runs the lowered kernels, each on the device of its engine kernel. Anything that does not
match (a shape that does not divide, a group that would close a cycle) stays a lowered
kernel of its own, timed as before.
"""

from __future__ import annotations

from typing import Any

from pimbuild.targets.gpus.kerneltime import ops

ROW_KINDS = ("elementwise", "reduction")


class Graph:
    """Producers and readers of a ``kernels.json``'s buffers."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.kernels = data["kernels"]
        self.buffers = data["buffers"]
        self.producer = {b: k["id"] for k in self.kernels for b in k["writes"]}
        self.readers: dict[str, list[int]] = {}
        for k in self.kernels:
            for b in k["reads"]:
                self.readers.setdefault(b, []).append(k["id"])
        self.outputs = set(data.get("outputs", []))

    def weight(self, b: str) -> bool:
        info = self.buffers.get(b, {})
        return info.get("role") not in (None, "input") or b.startswith("const")

    def activations(self, k: dict[str, Any]) -> list[str]:
        return [b for b in k["reads"] if not self.weight(b)]

    def consumers(self, ids: set[int]) -> set[int]:
        return {r for i in ids for b in self.kernels[i]["writes"] for r in self.readers.get(b, ())}


def _elements(nbytes: int) -> int:
    return max(1, nbytes // ops.IR_FLOAT_BYTES)


def _batch_tokens(signature: dict[str, Any]) -> tuple[int, int] | None:
    """(sequences, tokens per sequence) from the forward's first 3-d input."""
    for a in signature.get("args", []):
        if a.get("kind") == "input" and len(a.get("shape") or []) == 3:
            return int(a["shape"][0]), int(a["shape"][1])
    return None


def attention(g: Graph, first: dict[str, Any], shape: tuple[int, int] | None
              ) -> tuple[set[int], dict[str, int]] | None:
    """The attention group starting at contraction ``first`` (``Q K^T``) and its dims."""
    if shape is None or len(g.activations(first)) < 2 or first["kind"] != "contraction":
        return None
    region, frontier, second = set(), {first["id"]}, None
    while frontier:
        nxt = g.consumers(frontier) - region - {first["id"]}
        frontier = set()
        for i in nxt:
            k = g.kernels[i]
            if k["kind"] == "contraction" and len(g.activations(k)) >= 2 and second is None:
                second = k
            elif k["kind"] in ROW_KINDS and second is None:
                region.add(i)
                frontier.add(i)
            elif k["kind"] == "contraction" and second is not None and i == second["id"]:
                continue
            else:
                return None
    if second is None or (g.consumers(region) - region - {second["id"]}):
        return None
    dims = _attention_dims(g, first, second, region, shape)
    if dims is None:
        return None
    members = {first["id"], second["id"], *region}
    for k in (first, second):  # the copies that build keys and values from the cache
        for b in g.activations(k):
            p = g.producer.get(b)
            if p is not None and g.kernels[p]["kind"] == "copy" \
                    and set(g.readers.get(b, ())) <= members:
                members.add(p)
    return members, dims


def _attention_dims(g: Graph, first: dict[str, Any], second: dict[str, Any],
                    region: set[int], shape: tuple[int, int]) -> dict[str, int] | None:
    """b, m, n, k (head dim), h, g from the two contractions' sizes; None if they do not
    divide as attention's do."""
    b, m = shape
    scores = _elements(sum(first["writes"].values()))
    d = first["iterations"] // scores if scores else 0
    # P V: P comes from the softmax (or Q K^T itself); V is the other operand
    values = [_elements(n) for buf, n in second["reads"].items()
              if not g.weight(buf) and g.producer.get(buf) not in region | {first["id"]}]
    operands = [_elements(n) for buf, n in first["reads"].items() if not g.weight(buf)]
    if not d or len(values) != 1 or len(operands) != 2 or values[0] not in operands:
        return None
    kv = values[0]
    q = operands[1] if operands[0] == kv else operands[0]
    if q * scores == 0 or first["iterations"] % q:
        return None
    n = first["iterations"] // q
    h, rest = divmod(scores, n * b * m) if n * b * m else (0, 1)
    heads_kv, rest2 = divmod(kv, n * d * b) if n * d * b else (0, 1)
    if rest or rest2 or not h or not heads_kv or h % heads_kv or m > n:
        return None
    return {"b": b, "m": m, "n": n, "k": d, "h": h, "g": heads_kv}


def merged_gemms(g: Graph, taken: set[int]) -> list[set[int]]:
    """Contractions of one activation with different weights, in groups of two or more."""
    by: dict[str, list[int]] = {}
    for k in g.kernels:
        acts = g.activations(k)
        if k["id"] in taken or k["kind"] != "contraction" or len(acts) != 1 \
                or len(k["reads"]) != 2:
            continue
        by.setdefault(acts[0], []).append(k["id"])
    return [set(ids) for ids in by.values() if len(ids) >= 2]


def row_norms(g: Graph, taken: set[int]) -> list[tuple[set[int], bool]]:
    """A row reduction, the elementwise kernels that feed only it from the same input, the
    elementwise kernel that reads it and that input, and the residual add before."""
    out = []
    for r in g.kernels:
        if r["id"] in taken or r["kind"] != "reduction":
            continue
        group, source = {r["id"]}, None
        for b in g.activations(r):
            p = g.producer.get(b)
            if p is not None and p not in taken and g.kernels[p]["kind"] == "elementwise" \
                    and set(g.readers.get(b, ())) == {r["id"]}:
                group.add(p)
                source = (g.activations(g.kernels[p]) or [None])[0]
            else:
                source = source or b
        apply = [i for i in g.consumers({r["id"]}) if i not in taken
                 and g.kernels[i]["kind"] == "elementwise"
                 and source in g.kernels[i]["reads"]]
        if len(apply) != 1 or source is None:
            continue
        group.add(apply[0])
        add = g.producer.get(source)
        fused_add = add is not None and add not in taken \
            and g.kernels[add]["kind"] == "elementwise" \
            and len(g.activations(g.kernels[add])) == 2
        if fused_add:
            group.add(add)
        out.append((group, fused_add))
        taken |= group
    return out


def fused_elementwise(g: Graph, taken: set[int], group_of: dict[int, int]) -> list[set[int]]:
    """The remaining elementwise kernels and copies, joined through their buffers and by the
    group that feeds them."""
    left = [k["id"] for k in g.kernels if k["id"] not in taken
            and k["kind"] in ("elementwise", "copy")]
    parent = {i: i for i in left}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    fed: dict[int, int] = {}
    for i in left:
        for b in g.activations(g.kernels[i]):
            p = g.producer.get(b)
            if p in parent:
                parent[find(i)] = find(p)
            elif p is not None and p in group_of:
                if group_of[p] in fed:
                    parent[find(i)] = find(fed[group_of[p]])
                else:
                    fed[group_of[p]] = i
    comps: dict[int, set[int]] = {}
    for i in left:
        comps.setdefault(find(i), set()).add(i)
    return [c for c in comps.values() if len(c) >= 2]


def engine(data: dict[str, Any], signature: dict[str, Any]) -> dict[str, Any]:
    """``data`` (extract's kernels) with its kernels grouped into engine kernels; the lowered
    kernels kept under ``lowered`` and each engine kernel's ``members``."""
    g = Graph(data)
    shape = _batch_tokens(signature)
    groups: list[tuple[set[int], str, dict[str, int]]] = []
    taken: set[int] = set()
    for k in g.kernels:
        found = None if k["id"] in taken else attention(g, k, shape)
        if found and not (found[0] & taken):
            kind = "decode_attention" if found[1]["m"] == 1 and found[1]["n"] > 1 \
                else "prefill_attention"
            groups.append((found[0], kind, found[1]))
            taken |= found[0]
    for ids in merged_gemms(g, taken):
        groups.append((ids, "linear", {}))
        taken |= ids
    for ids, fused_add in row_norms(g, set(taken)):
        groups.append((ids, "add_rmsnorm" if fused_add else "rmsnorm", {}))
        taken |= ids
    group_of = {i: n for n, (ids, _, _) in enumerate(groups) for i in ids}
    for ids in fused_elementwise(g, taken, group_of):
        groups.append((ids, "elementwise", {}))
        taken |= ids
    groups += [({k["id"]}, "", {}) for k in g.kernels if k["id"] not in taken]
    order = _topological(g, [ids for ids, _, _ in groups])
    if order is None:  # a grouping that closes a cycle: the lowered kernels as they are
        return {**data, "lowered": data["kernels"],
                "kernels": [{**k, "members": [k["id"]]} for k in data["kernels"]]}
    kernels = [_merge(g, groups[n], new, groups, group_of, shape)
               for new, n in enumerate(order)]
    return {**data, "kernels": kernels, "lowered": data["kernels"]}


def _topological(g: Graph, groups: list[set[int]]) -> list[int] | None:
    """The groups in an order every dependency respects (by first member), None on a cycle."""
    of = {i: n for n, ids in enumerate(groups) for i in ids}
    after = {n: {of[r] for r in g.consumers(ids)} - {n} for n, ids in enumerate(groups)}
    indegree = {n: 0 for n in after}
    for succ in after.values():
        for s in succ:
            indegree[s] += 1
    ready = sorted((min(groups[n]), n) for n, d in indegree.items() if d == 0)
    order = []
    while ready:
        _, n = ready.pop(0)
        order.append(n)
        for s in after[n]:
            indegree[s] -= 1
            if indegree[s] == 0:
                ready.append((min(groups[s]), s))
                ready.sort()
    return order if len(order) == len(groups) else None


def _merge(g: Graph, group: tuple[set[int], str, dict[str, int]], new: int,
           groups: list, group_of: dict[int, int], shape: tuple[int, int] | None
           ) -> dict[str, Any]:
    """One engine kernel: its members' external reads and escaping writes, summed work, and
    the op that times it."""
    ids, kind, dims = group
    members = [g.kernels[i] for i in sorted(ids)]
    inside = {b for k in members for b in k["writes"]}
    reads = {b: n for k in members for b, n in k["reads"].items() if b not in inside}
    writes = {b: n for k in members for b, n in k["writes"].items()
              if b in g.outputs or set(g.readers.get(b, ())) - ids}
    first = members[0]
    out = {**{f: first.get(f) for f in ("source_op", "source_module", "source_node",
                                         "lowered_op")},
           "id": new, "members": sorted(ids), "flops": sum(k["flops"] for k in members),
           "iterations": sum(k.get("iterations", 0) for k in members),
           "reads": reads, "writes": writes,
           "merged_init": any(k.get("merged_init") for k in members)}
    if len(ids) == 1 and first["kind"] != "elementwise":  # timed as ops.from_kernel's op
        return {**first, **out, "op": first["op"], "kind": first["kind"]}
    engine_op = _engine_op(g, members, kind, dims, reads, writes, groups, group_of, shape)
    common = _common_module([str(k.get("source_module") or "") for k in members])
    return {**out, "op": f"engine.{engine_op['op']}", "source_node": engine_op["op"],
            "source_module": common,
            "kind": "contraction" if engine_op["op"] in ("linear", *ops.ATTENTION)
            else "reduction" if engine_op["op"] in ops.ROWS else "elementwise",
            "engine_op": engine_op}


def _common_module(modules: list[str]) -> str:
    """The module path the members share (``self_attn`` for q, k and v), "" if none (AF's
    split reads it: ``closedform.ATTENTION``)."""
    if not all(modules):
        return ""
    parts = [m.split(".") for m in modules]
    shared = []
    for names in zip(*parts, strict=False):
        if len(set(names)) != 1:
            break
        shared.append(names[0])
    return ".".join(shared)


def _engine_op(g: Graph, members: list[dict[str, Any]], kind: str, dims: dict[str, int],
               reads: dict[str, int], writes: dict[str, int], groups: list,
               group_of: dict[int, int], shape: tuple[int, int] | None) -> dict[str, Any]:
    """The op (``ops.Op`` fields but ``dtype``) that stands for a group."""
    if kind in ops.ATTENTION:
        return {"op": kind, **dims}
    if kind == "linear":
        shapes = [ops.from_kernel(k, {}, "fp32") for k in members]
        return {"op": "linear", "b": 1, "m": shapes[0].b * shapes[0].m, "n": shapes[0].n,
                "k": sum(s.k for s in shapes)}
    out = _elements(max(writes.values(), default=4))
    if kind in ("rmsnorm", "add_rmsnorm"):
        reduction = next(k for k in members if k["kind"] == "reduction")
        rows = _elements(sum(reduction["writes"].values()))
        return {"op": kind, "b": rows, "h": max(1, out // rows)}
    feeders = {group_of.get(g.producer.get(b, -1)) for b in reads}
    feeds = {group_of.get(r) for k in members for b in k["writes"]
             for r in g.readers.get(b, ()) if r not in {m["id"] for m in members}}
    kinds = {groups[n][1] for n in feeders | feeds if n is not None}
    total = sum(_elements(n) for n in writes.values())
    if {"linear"} <= kinds and kinds & set(ops.ATTENTION):
        rows = _rows(total, shape)
        return {"op": "rope", "b": rows, "h": max(1, total // rows)}
    streams = [n for b, n in reads.items() if not g.weight(b) and _elements(n) >= out // 2]
    per = sum(k["flops"] for k in members) / max(1, out)
    name = ("silu_mul" if per >= 4 else "add") if len(streams) >= 2 \
        else "gelu" if per >= 4 else "addu"
    rows = _rows(out, shape)
    return {"op": name, "b": rows, "h": max(1, out // rows)}


def _rows(elements: int, shape: tuple[int, int] | None) -> int:
    """A vector op's rows: one per token where the tokens divide it, else ``ops.ROW``-long."""
    if shape and elements % (shape[0] * shape[1]) == 0:
        return shape[0] * shape[1]
    return elements // ops.ROW if elements % ops.ROW == 0 and elements >= ops.ROW else 1


def lowered_place(data: dict[str, Any], place: list[int]) -> list[int]:
    """An engine placement (per engine kernel, over whole layers) as the lowered kernels'."""
    kernels = data["kernels"]
    if "lowered" not in data:
        return place
    n_eng, n_low = len(kernels), len(data["lowered"])
    of = {i: e for e, k in enumerate(kernels) for i in k["members"]}
    return [place[layer * n_eng + of[j]] for layer in range(len(place) // n_eng)
            for j in range(n_low)]


def summary(data: dict[str, Any]) -> str:
    """``10 engine kernels from 34 lowered``."""
    if "lowered" not in data:
        return f"{len(data['kernels'])} kernels"
    return f"{len(data['kernels'])} engine kernels from {len(data['lowered'])} lowered"

