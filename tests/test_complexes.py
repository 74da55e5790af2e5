"""pimbuild.frontend.complexes: complex tensors as pairs of real tensors, checked on the rewritten
exported program itself (run by PyTorch, no lowering); tests/test_recipes.py lowers them."""

from __future__ import annotations

import pytest
import torch

from pimbuild import frontend
from pimbuild.core.stage import ModelParams
from pimbuild.frontend import complexes
from tests import odd_recipes


def _rewritten(recipe) -> tuple[torch.export.ExportedProgram, int]:
    prog = torch.export.export(recipe.module, tuple(recipe.inputs.values()), strict=False)
    prog = prog.run_decompositions(frontend.decompositions())
    return prog, complexes.real_pairs(prog, frontend.decompositions())


@pytest.mark.parametrize("name", ["rotary_complex", "complex_arithmetic", "complex_parameter",
                                  "complex_rules"])
def test_rewritten_program_computes_what_eager_does(name: str) -> None:
    recipe = getattr(odd_recipes, name)(8)
    with torch.no_grad():
        want = recipe.module(*recipe.inputs.values())
    prog, rewritten = _rewritten(recipe)
    assert rewritten > 0
    for node in prog.graph.nodes:
        assert not complexes._complex(node), node.format_node()
    got = prog.module()(*[frontend.run._real_view(v) for v in recipe.inputs.values()])
    want, got = (list(w) if isinstance(w, tuple) else [w] for w in (want, got))
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        w = frontend.run._real_view(w)  # a complex output is returned as view_as_real of it
        assert g.shape == w.shape and g.dtype == w.dtype
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)


def test_complex_state_is_passed_as_pairs() -> None:
    recipe = odd_recipes.complex_parameter(8)
    prog, _ = _rewritten(recipe)
    assert prog.state_dict["w"].shape == (8, 8, 2)
    assert isinstance(prog.state_dict["w"], torch.nn.Parameter)
    torch.testing.assert_close(prog.state_dict["w"], torch.view_as_real(recipe.module.w.detach()))
    placeholders = {n.name: n.meta["val"] for n in prog.graph.nodes if n.op == "placeholder"}
    assert placeholders["b_b"].dtype == torch.float64 and placeholders["b_b"].shape == (8, 2)


def test_an_op_without_a_rule_is_refused_by_name() -> None:
    recipe = odd_recipes.Recipe(odd_recipes._Fn(lambda x: torch.fft.rfft(x).abs()),
                                {"x": torch.randn(4, 16)})
    with pytest.raises(complexes.NoRule) as e:
        _rewritten(recipe)
    assert e.value.node.target is torch.ops.aten.fft_rfft.default
    assert "has no rule" in str(e.value)


def test_complex_parameters_keep_their_imaginary_part() -> None:
    # build_recipe cast the module with Module.to(float32), which drops the imaginary part
    # of a complex parameter (and the forward then failed in eager); the float64 referee
    # (reference64) did the same.
    p = ModelParams(name="c", recipe="tests.odd_recipes:complex_parameter", size={"n": 8},
                    dtype="float32", seed=0)
    recipe = frontend.build_recipe(p)
    assert recipe.module.w.dtype == torch.complex64 and recipe.module.w.imag.abs().sum() > 0
    assert recipe.module.b.dtype == torch.complex64
    assert recipe.cast == {"parameters": {"complex128": 1}}
    sig = {"args": [], "outputs": [{}, {}]}
    exact = frontend.reference64(p, sig)
    expected = frontend.eager(p, recipe)
    assert exact is not None and exact[0].dtype == "float64"
    for e, x in zip(expected, exact, strict=True):
        torch.testing.assert_close(torch.from_numpy(x).float(), e, rtol=1e-4, atol=1e-4)
