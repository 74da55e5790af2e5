"""Complex tensors as pairs of real tensors (``real_pairs``), before import.

The lowered program has no complex element type: torch-mlir lowers almost no op on complex
tensors. So before the exported graph is imported, each complex value in it becomes two real
tensors of its shape, its real and imaginary parts (``Z``), and each op on complex values is
replaced by the real arithmetic that computes them: its rule in ``RULES``, traced with
``make_fx`` into aten ops and inlined in its place. A complex parameter, buffer or constant
reaches the lowered program as ``torch.view_as_real`` of it (one more trailing dimension of
extent 2 holding the parts; ``frontend.materialize`` passes it so), and a complex result is
returned so (``view_as_real``'s rule: the parts stacked). An op on complex values without a
rule (an FFT, a complex matrix decomposition) is refused by name (``NoRule``). See
docs/design.md §9, "Complex tensors are computed as pairs of real ones".
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.fx import Graph, Node
from torch.utils import _pytree as pytree

aten = torch.ops.aten
REAL = {torch.complex32: torch.float16, torch.complex64: torch.float32,
        torch.complex128: torch.float64}


class NoRule(Exception):
    """``node`` computes on complex values in a way ``real_pairs`` cannot rewrite: an op
    without a rule, or one whose rule cannot take its arguments."""

    def __init__(self, node: Node, what: str):
        super().__init__(what)
        self.node = node


@dataclass
class Z:
    """A complex tensor as its real and imaginary parts: real tensors of one shape (or Python
    numbers, for a complex scalar). Real operands are Python numbers or real tensors."""

    re: Any
    im: Any

    def __post_init__(self):
        if isinstance(self.re, torch.Tensor) and isinstance(self.im, torch.Tensor) \
                and self.re.shape != self.im.shape:
            self.re, self.im = torch.broadcast_tensors(self.re, self.im)

    def __neg__(self) -> Z:
        return Z(-self.re, -self.im)

    def __add__(self, other) -> Z:
        if not _is_z(other):
            return Z(self.re + other, self.im)
        other = lift(other)
        return Z(self.re + other.re, self.im + other.im)

    __radd__ = __add__

    def __sub__(self, other) -> Z:
        return self + -lift(other)

    def __rsub__(self, other) -> Z:
        return lift(other) + -self

    def __mul__(self, other) -> Z:
        if not _is_z(other):
            return Z(self.re * other, self.im * other)
        other = lift(other)
        return Z(self.re * other.re - self.im * other.im,
                 self.re * other.im + self.im * other.re)

    __rmul__ = __mul__

    def __truediv__(self, other) -> Z:
        if not _is_z(other):
            return Z(self.re / other, self.im / other)
        return self * lift(other).reciprocal()

    def __rtruediv__(self, other) -> Z:
        return lift(other) * self.reciprocal()

    def reciprocal(self) -> Z:
        norm = self.re * self.re + self.im * self.im
        return Z(self.re / norm, -self.im / norm)

    def conj(self) -> Z:
        return Z(self.re, -self.im)

    def abs(self) -> torch.Tensor:
        return torch.hypot(self.re, self.im)  # substitutes._hypot: no overflow

    def exp(self) -> Z:
        scale = torch.exp(self.re)
        return Z(scale * torch.cos(self.im), scale * torch.sin(self.im))


def _is_z(value: Any) -> bool:
    return isinstance(value, (Z, complex))


def lift(value: Any) -> Z:
    """A complex operand as a ``Z``: a Python complex by its parts, a real one with a zero
    imaginary part."""
    if isinstance(value, Z):
        return value
    if isinstance(value, complex):
        return Z(value.real, value.imag)
    return Z(value, torch.zeros_like(value) if isinstance(value, torch.Tensor) else 0.0)


def _parts(op: Callable) -> Callable:
    """The rule of an op that acts on the real and imaginary parts alike (a view, a slice, a
    sum, a concatenation): the op on each part, with every other argument as it is."""
    def rule(*args, **kwargs):
        re = op(*_each(args, "re"), **_each(kwargs, "re"))
        im = op(*_each(args, "im"), **_each(kwargs, "im"))
        if isinstance(re, (list, tuple)):
            return [Z(r, i) for r, i in zip(re, im, strict=True)]
        return Z(re, im)
    return rule


def _each(args: Any, part: str) -> Any:
    """``args`` with every ``Z`` replaced by its part ``re`` or ``im``, and every tensor in a
    list beside one (``cat((z, x))``) lifted to complex first; a complex dtype becomes its
    real dtype."""
    def one(value):
        if isinstance(value, Z):
            return getattr(value, part)
        if isinstance(value, torch.dtype):
            return REAL.get(value, value)
        if isinstance(value, (list, tuple)) and any(isinstance(v, Z) for v in value):
            return type(value)(getattr(lift(v), part) for v in value)
        return value
    if isinstance(args, dict):
        return {k: one(v) for k, v in args.items()}
    return [one(v) for v in args]


def _filled(op: Callable, at: int) -> Callable:
    """The rule of a factory filling a complex tensor with the number ``args[at]``."""
    def rule(*args, **kwargs):
        value = lift(args[at])
        args = [a.re if isinstance(a, Z) else a for a in args]  # full_like: the shape
        kwargs = {k: REAL.get(v, v) if k == "dtype" else v for k, v in kwargs.items()}
        return Z(*(op(*args[:at], part, *args[at + 1:], **kwargs)
                   for part in (value.re, value.im)))
    return rule


def _to_copy(x, **kwargs):
    """``x.to(dtype)``: to a complex dtype from either kind, or from complex to a real dtype
    (PyTorch keeps the real part)."""
    dtype = kwargs.pop("dtype", None)
    if isinstance(x, Z) and dtype is not None and not dtype.is_complex:
        return aten._to_copy.default(x.re, dtype=dtype, **kwargs)
    part = REAL.get(dtype) if dtype is not None else None
    x = lift(x)
    return Z(*(aten._to_copy.default(v, dtype=part, **kwargs) for v in (x.re, x.im)))


def _pow(z, exponent):
    """``z ** exponent``: an integer exponent by repeated squaring (eager multiplies too, for
    squares and cubes), another real one in polar form, a complex one as exp(exponent log z)."""
    z = lift(z)
    if _is_z(exponent):
        return (_log(z) * exponent).exp()
    if isinstance(exponent, int) and abs(exponent) <= 64:
        result, square, n = None, z, abs(exponent)
        while n:
            if n & 1:
                result = square if result is None else result * square
            square, n = square * square, n >> 1
        if result is None:  # exponent 0
            result = Z(torch.ones_like(z.re), torch.zeros_like(z.im))
        return result.reciprocal() if exponent < 0 else result
    radius = torch.pow(z.re * z.re + z.im * z.im, exponent / 2)
    theta = torch.atan2(z.im, z.re) * exponent
    return Z(radius * torch.cos(theta), radius * torch.sin(theta))


def _log(z):
    return Z(0.5 * torch.log(z.re * z.re + z.im * z.im), torch.atan2(z.im, z.re))


def _matmul(op: Callable) -> Callable:
    """The rule of a matrix product (mm, bmm) of complex or mixed operands."""
    def rule(a, b):
        a, b = lift(a), lift(b)
        return Z(op(a.re, b.re) - op(a.im, b.im), op(a.re, b.im) + op(a.im, b.re))
    return rule


def _times(x: Any, alpha: Any) -> Any:
    """``x * alpha`` (the ``alpha`` of add and sub), with no op for the usual 1."""
    return x if alpha == 1 else x * alpha


def _equal(a, b) -> torch.Tensor:
    a, b = lift(a), lift(b)
    return (a.re == b.re) & (a.im == b.im)


def _where(cond, a, b):
    a, b = lift(a), lift(b)
    return Z(torch.where(cond, a.re, b.re), torch.where(cond, a.im, b.im))


PARTS = [aten.view.default, aten._unsafe_view.default, aten.reshape.default,
         aten.expand.default, aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims,
         aten.squeeze.default, aten.permute.default, aten.transpose.int, aten.t.default,
         aten.slice.Tensor, aten.select.int, aten.narrow.default, aten.clone.default,
         aten.alias.default, aten.detach.default, aten.lift_fresh_copy.default,
         aten.index.Tensor, aten.index_select.default, aten.gather.default, aten.flip.default,
         aten.roll.default, aten.repeat.default, aten.cat.default, aten.stack.default,
         aten.split.Tensor, aten.split_with_sizes.default, aten.unbind.int,
         aten.sum.dim_IntList, aten.sum.default, aten.mean.dim, aten.mean.default,
         aten.cumsum.default, aten.neg.default, aten.zeros_like.default,
         aten.empty_like.default, aten.empty.memory_format, aten.empty_strided.default,
         aten.diagonal.default, aten.tril.default, aten.triu.default]

RULES: dict[Any, Callable] = {
    **{op: _parts(op) for op in PARTS},
    aten.view_as_complex.default: lambda x: Z(x[..., 0], x[..., 1]),
    aten.view_as_real.default: lambda z: torch.stack((z.re, z.im), -1),
    aten.complex.default: Z,
    aten.polar.default: lambda r, theta: Z(r * torch.cos(theta), r * torch.sin(theta)),
    aten.real.default: lambda z: z.re,
    aten.imag.default: lambda z: z.im,
    aten.add.Tensor: lambda a, b, alpha=1: lift(a) + _times(b, alpha),
    aten.add.Scalar: lambda a, b, alpha=1: lift(a) + _times(b, alpha),
    aten.sub.Tensor: lambda a, b, alpha=1: lift(a) - _times(b, alpha),
    aten.sub.Scalar: lambda a, b, alpha=1: lift(a) - _times(b, alpha),
    aten.rsub.Scalar: lambda a, b, alpha=1: b - _times(lift(a), alpha),
    aten.mul.Tensor: lambda a, b: lift(a) * b,
    aten.mul.Scalar: lambda a, b: lift(a) * b,
    aten.div.Tensor: lambda a, b: lift(a) / b,
    aten.div.Scalar: lambda a, b: lift(a) / b,
    aten.reciprocal.default: lambda z: z.reciprocal(),
    aten._conj.default: lambda z: z.conj(),
    aten.conj_physical.default: lambda z: z.conj(),
    aten.resolve_conj.default: lambda z: z,
    aten.resolve_neg.default: lambda z: z,
    aten.abs.default: lambda z: z.abs(),
    aten.angle.default: lambda z: torch.atan2(z.im, z.re),
    aten.sgn.default: lambda z: z / torch.where(z.abs() == 0, 1.0, z.abs()),
    aten.exp.default: lambda z: z.exp(),
    aten.log.default: _log,
    aten.pow.Tensor_Scalar: _pow,
    aten.pow.Tensor_Tensor: lambda a, b: (_log(lift(a)) * b).exp(),
    aten.sin.default: lambda z: Z(torch.sin(z.re) * torch.cosh(z.im),
                                  torch.cos(z.re) * torch.sinh(z.im)),
    aten.cos.default: lambda z: Z(torch.cos(z.re) * torch.cosh(z.im),
                                  -torch.sin(z.re) * torch.sinh(z.im)),
    aten.sqrt.default: lambda z: _pow(z, 0.5),
    aten.where.self: _where,
    aten.eq.Tensor: _equal,
    aten.eq.Scalar: _equal,
    aten.ne.Tensor: lambda a, b: ~_equal(a, b),
    aten.ne.Scalar: lambda a, b: ~_equal(a, b),
    aten._to_copy.default: _to_copy,
    torch.ops.prims.convert_element_type.default: lambda x, dtype: _to_copy(x, dtype=dtype),
    aten.mm.default: _matmul(aten.mm.default),
    aten.bmm.default: _matmul(aten.bmm.default),
    aten.full.default: _filled(aten.full.default, 1),
    aten.full_like.default: _filled(aten.full_like.default, 1),
    aten.scalar_tensor.default: _filled(aten.scalar_tensor.default, 0),
}
DROPPED = {aten._assert_tensor_metadata.default}  # dtype assertions on a complex value


def real_pairs(prog: ExportedProgram, decompositions: dict) -> int:
    """Rewrite ``prog`` in place so no value of its graph is complex; returns how many ops
    were rewritten. Raises ``NoRule`` where it cannot."""
    graph = prog.graph_module.graph
    nodes = list(graph.nodes)
    if not any(_complex(n) for n in nodes):
        return 0
    from torch._guards import detect_fake_mode
    from torch.fx.passes.shape_prop import _extract_tensor_metadata

    fake_mode = detect_fake_mode([n.meta["val"] for n in nodes if "val" in n.meta])
    specs = {spec.arg.name: spec for spec in prog.graph_signature.input_specs}
    first_op = next(n for n in nodes if n.op != "placeholder")
    env: dict[Node, Any] = {}  # a complex value -> its Z of nodes (a list of Z: split)
    done: list[Node] = []
    for node in nodes:
        if node.op == "placeholder" and _complex(node):
            _pair_state(prog, specs[node.name])
            with fake_mode:
                node.meta["val"] = torch.view_as_real(node.meta["val"].resolve_conj())
            node.meta["tensor_meta"] = _extract_tensor_metadata(node.meta["val"])
            env[node] = _inline(graph, first_op, RULES[aten.view_as_complex.default],
                                ((node,), {}), {}, node, decompositions, fake_mode)
        elif node.op == "output":
            for a in [a for a in node.all_input_nodes if a in env]:  # returned as view_as_real
                node.replace_input_with(a, _inline(
                    graph, node, RULES[aten.view_as_real.default], ((a,), {}), env, a,
                    decompositions, fake_mode))
        elif node.op == "call_function" and (_complex(node) or any(
                a in env for a in node.all_input_nodes)):
            _rewrite(graph, node, env, decompositions, fake_mode)
            done.append(node)
    for node in reversed(done):
        graph.erase_node(node)
    prog.graph_module.recompile()
    return len(done)


def _complex(node: Node) -> bool:
    vals = node.meta.get("val")
    return any(getattr(v, "dtype", torch.float32).is_complex
               for v in (vals if isinstance(vals, (list, tuple)) else [vals]))


def _pair_state(prog: ExportedProgram, spec) -> None:
    """A complex parameter, buffer or constant is held as ``view_as_real`` of it (an input
    is passed so by ``frontend.materialize``)."""
    if spec.kind.name == "USER_INPUT":
        return
    store = prog.constants if spec.target in prog.constants else prog.state_dict
    value = store[spec.target]
    pair = torch.view_as_real(value.detach().resolve_conj())
    store[spec.target] = (torch.nn.Parameter(pair, requires_grad=False)
                          if isinstance(value, torch.nn.Parameter) else pair)


def _rewrite(graph: Graph, node: Node, env: dict[Node, Any], decompositions: dict,
             fake_mode) -> None:
    """Replace ``node`` by its rule's real ops: a complex result goes to ``env``, a real one
    takes over the node's uses."""
    if node.target is operator.getitem:
        env[node] = env[node.args[0]][node.args[1]]
        return
    if node.target in DROPPED:
        return
    rule = RULES.get(node.target)
    if rule is None:
        raise NoRule(node, "has no rule for complex tensors")
    try:
        result = _inline(graph, node, rule, (node.args, node.kwargs), env, node,
                         decompositions, fake_mode)
    except Exception as e:  # the rule cannot take these arguments
        raise NoRule(node, f"cannot be computed on pairs of reals ({type(e).__name__}: "
                           f"{str(e).splitlines()[0] if str(e) else ''})") from None
    if isinstance(result, Node):
        node.replace_all_uses_with(result)
    else:
        env[node] = result


def _inline(graph: Graph, before: Node, rule: Callable, call: tuple, env: dict[Node, Any],
            source: Node, decompositions: dict, fake_mode) -> Any:
    """Trace ``rule`` on ``call``'s (args, kwargs), with each complex node as a ``Z`` of its
    parts, and insert its ops before ``before``, with ``source``'s provenance (the module and
    the op the model wrote). Returns the result: a node, or a ``Z`` (or list of them) of
    nodes."""
    from torch.fx.experimental.proxy_tensor import make_fx

    inputs: list[Node] = []

    def slot(a: Node) -> Any:
        parts = env.get(a, a)
        flat = [parts.re, parts.im] if isinstance(parts, Z) else [parts]
        inputs.extend(flat)
        ids = list(range(len(inputs) - len(flat), len(inputs)))
        return Z(_Slot(ids[0]), _Slot(ids[1])) if isinstance(parts, Z) else _Slot(ids[0])

    template = torch.fx.node.map_arg(call, slot)
    shape: list[Any] = []

    def traced(*tensors):
        def fill(v: Any) -> Any:
            if isinstance(v, Z):
                return Z(tensors[v.re.i], tensors[v.im.i])
            return tensors[v.i] if isinstance(v, _Slot) else v

        args, kwargs = pytree.tree_map(fill, template,
                                       is_leaf=lambda v: isinstance(v, (Z, _Slot)))
        out = rule(*args, **kwargs)
        shape.append(out)
        return [t for z in (out if isinstance(out, list) else [out])
                for t in ((z.re, z.im) if isinstance(z, Z) else (z,))]

    with fake_mode:
        gm = make_fx(traced, decomposition_table=decompositions)(
            *[a.meta["val"] for a in inputs])
    if any(n.op == "get_attr" for n in gm.graph.nodes):
        raise AssertionError(f"the complex rule of {source.target} made a tensor constant")
    val_map = dict(zip([n for n in gm.graph.nodes if n.op == "placeholder"], inputs,
                       strict=True))
    with graph.inserting_before(before):
        outs = graph.graph_copy(gm.graph, val_map)
    for new in val_map.values():
        if new not in inputs:
            for key in ("nn_module_stack", "from_node", "stack_trace", "source_fn_stack"):
                if key in source.meta:
                    new.meta[key] = source.meta[key]
    return _shaped(shape[0], iter(outs))


@dataclass(frozen=True)
class _Slot:
    """The ``i``-th tensor of a traced rule's inputs, in its call's template."""

    i: int


def _shaped(out: Any, nodes) -> Any:
    """The traced rule's result ``out`` (a tensor, ``Z`` or list of ``Z``) rebuilt from the
    inlined output ``nodes``."""
    if isinstance(out, list):
        return [_shaped(z, nodes) for z in out]
    if isinstance(out, Z):
        return Z(next(nodes), next(nodes))
    return next(nodes)
