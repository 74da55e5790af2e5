"""Bad input: one clear message, a non-zero exit, and no partial artifact in the store."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pimbuild.core.errors import ConfigError, RecipeError, StageError
from tests.conftest import run_cli, store_entries


def _assert_store_clean(store: Path) -> None:
    for entry in store_entries(store):
        assert not entry.name.startswith(".tmp"), f"partial artifact left: {entry}"
        assert (entry / ".complete").is_file(), f"incomplete artifact: {entry}"


def test_negative_size(run_build, store: Path) -> None:
    with pytest.raises(ConfigError, match=r"model.size.n must be a positive integer, got -4"):
        run_build(["model=relu", "model.size.n=-4"])
    assert store_entries(store) == []


def test_register_block_must_be_positive(run_build, store: Path) -> None:
    with pytest.raises(ConfigError, match=r"lowering.register_block must be >= 1 \(got 0\)"):
        run_build(["model=relu", "lowering.register_block=0"])
    assert store_entries(store) == []


def test_unknown_size_parameter(run_build, store: Path) -> None:
    with pytest.raises(ConfigError, match="bad size parameters"):
        run_build(["model=relu", "+model.size.m=4"])
    _assert_store_clean(store)


def test_type_error_inside_builder_is_the_recipes(run_build, store: Path) -> None:
    # The size fits the builder's parameters: the TypeError is the builder's own, not a bad
    # size parameter.
    with pytest.raises(RecipeError, match=r"the recipe builder raised TypeError: .*bogus_field"):
        run_build(["model=relu", "model.recipe=tests.bad_recipes:builder_type_error"])
    _assert_store_clean(store)


def test_missing_size_parameter_names_the_builders_signature(run_build, store: Path) -> None:
    with pytest.raises(ConfigError, match=r"bad size parameters .*takes \(n: .*, m: .*\)"):
        run_build(["model=relu", "model.recipe=tests.bad_recipes:two_sizes"])
    _assert_store_clean(store)


def test_dynamic_dimension_names_input_and_dimension(run_build, store: Path) -> None:
    with pytest.raises(RecipeError, match=r"input 'tokens' has a dynamic dimension 0"):
        run_build(["model=relu", "model.recipe=tests.bad_recipes:dynamic", "model.size.n=8"])
    _assert_store_clean(store)
    assert not any((store / "lower").iterdir())


def test_forward_that_raises_shows_its_message(run_build, store: Path) -> None:
    with pytest.raises(RecipeError, match="broken on purpose"):
        run_build(["model=relu", "model.recipe=tests.bad_recipes:raising"])
    _assert_store_clean(store)


def test_unlowerable_operator_saves_input_and_repro(run_build, store: Path) -> None:
    with pytest.raises(StageError) as err:
        run_build(["model=relu", "model.recipe=tests.bad_recipes:unlowerable",
                   "model.size={n:4}"])
    e = err.value
    assert e.stage == "lower"
    # Said as the model's operator, with the node it came from (a conversion failure's class).
    assert ("torch-mlir cannot lower aten.linalg_qr.default (node 'linalg_qr' in the model's "
            "forward): failed to legalize operation 'torch.aten.linalg_qr'") in str(e)
    assert e.saved_input is not None and e.saved_input.is_file()
    assert "torch.aten.linalg_qr" in e.saved_input.read_text()
    assert not str(e.saved_input).startswith(str(store))  # saved in the run dir, not the store
    _assert_store_clean(store)
    assert not any((store / "lower").iterdir())
    # The repro command fails the same way.
    repro = subprocess.run(e.repro, shell=True, capture_output=True, text=True,
                           env={"PATH": str(Path(__import__("sys").executable).parent)})
    assert repro.returncode == 1
    assert "aten.linalg_qr" in repro.stderr


def test_an_operator_torch_mlir_does_not_define_is_named(run_build, store: Path) -> None:
    """torch-mlir imports an aten op it has no definition of as a generic ``torch.operator``;
    the error names the op and the submodule, not the generic op's IR."""
    with pytest.raises(StageError, match=r"torch-mlir cannot lower aten.i0.default \(node "
                                          r"'i0' in 'inner'\): it has no definition of "
                                          r"torch.aten.i0; replace it"):
        run_build(["model=relu", "model.recipe=tests.bad_recipes:undefined_operator",
                   "model.size={n:8}"])
    _assert_store_clean(store)


def test_an_operator_with_a_known_way_round_says_it(run_build, store: Path) -> None:
    with pytest.raises(StageError, match=r"cannot lower aten.histc.default \(node 'histc' in "
                                          r"'experts'\): .*experts_implementation='batched_mm'"):
        run_build(["model=relu", "model.recipe=tests.bad_recipes:grouped_experts",
                   "model.size={n:8}"])
    _assert_store_clean(store)


def test_a_large_tensor_literal_is_refused_at_export(run_build, store: Path) -> None:
    with pytest.raises(RecipeError, match=r"model 'relu': the forward builds a tensor of 5000 "
                                          r"elements from a literal .*make it a buffer"):
        run_build(["model=relu", "model.recipe=tests.bad_recipes:large_literal",
                   "model.size={n:8}"])
    _assert_store_clean(store)
    assert not any((store / "lower").iterdir())


def test_a_pass_that_crashes_is_an_error_not_a_dead_process(run_build, store: Path) -> None:
    """torch-mlir segfaults lowering uint8 x scalar; pimbuild lowers an 8-bit integer module
    in a child process first and reports the crash with the saved IR."""
    with pytest.raises(StageError, match=r"crashed \(SIGSEGV\).*llvm/torch-mlir#4725") as err:
        run_build(["model=relu", "model.recipe=tests.bad_recipes:int8_scaled"])
    assert err.value.stage == "lower"
    assert "ui8" in err.value.saved_input.read_text()
    _assert_store_clean(store)


@pytest.mark.parametrize(("switched_off", "recipe", "pipeline", "op"), [
    # TorchToLinalg on the router's scatter with a negative dim
    ("frontend.nonnegative_scatter_dims", "topk_router", "TorchToLinalg",
     r"torch\.aten\.scatter\.src"),
    # the torch-dialect passes' folding of an int constant compared with a float (the build
    # died with no output before they ran in a child)
    ("frontend.fold_splat_constants", "constant_comparisons", "torch-dialect passes",
     r"torch\.aten\.gt\.Scalar"),
    # bufferization on a value returned twice (the build died with a stack, no error line)
    ("frontend.transforms.distinct_results", "outputs_computed_alike", "bufferization",
     r"return (%\d+), \1,"),
])
def test_any_crash_of_torch_mlir_is_an_error_line(run_build, store: Path, monkeypatch,
                                                  switched_off: str, recipe: str,
                                                  pipeline: str, op: str) -> None:
    """Every pass pipeline of lower runs in a child first: with pimbuild's rewrite that
    avoids a known crash switched off, the build fails with one error naming the crash, the
    saved IR and a repro."""
    import importlib

    module, name = switched_off.rsplit(".", 1)
    monkeypatch.setattr(importlib.import_module(f"pimbuild.{module}"), name, lambda graph: 0)
    with pytest.raises(StageError, match=rf"crashed \(SIG[A-Z]+\).*{pipeline}.*a bug in "
                                         rf"(MLIR or )?torch-mlir") as err:
        run_build(["model=relu", f"model.recipe=tests.odd_recipes:{recipe}",
                   "model.size={n:8}"])
    assert err.value.stage == "lower"
    assert re.search(op, err.value.saved_input.read_text())
    assert "pimbuild-opt" in err.value.repro
    _assert_store_clean(store)


def test_a_native_crash_elsewhere_prints_its_signal_and_stack() -> None:
    # What the CLI enables first: a segfault outside the isolated passes ended the process
    # with status -11 and nothing on stderr.
    code = ("import ctypes\nfrom pimbuild.commands import cli\ncli.report_crashes()\n"
            "def stage():\n    ctypes.string_at(0)\nstage()\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode < 0
    assert "Segmentation fault" in proc.stderr and "in stage" in proc.stderr


def test_unknown_stage(run_build, store: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown stage\(s\) \['simulate9'\] in stages="):
        run_build(["model=relu", "stages=[simulate9]"])
    assert store_entries(store) == []


@pytest.mark.slow
def test_cli_reports_one_clear_message(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = run_cli(["model=relu", "model.recipe=tests.bad_recipes:raising", f"store={store}",
                    f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path)
    assert proc.returncode == 1
    assert "error:" in proc.stderr and "broken on purpose" in proc.stderr
    assert "error:" not in proc.stdout
    assert "Traceback" not in proc.stdout + proc.stderr
    _assert_store_clean(store)


@pytest.mark.slow
def test_cli_unknown_model_lists_choices(tmp_path: Path) -> None:
    proc = run_cli(["model=resnet9000"], cwd=tmp_path)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error:") and "model/resnet9000" in line and "softmax" in line
    assert "_schema" not in line  # the schemas Hydra keeps in the group are not choices
    assert not (tmp_path / "outputs" / "artifacts").exists()


def test_old_stage_list_name_says_the_new_one() -> None:
    from pimbuild.commands.cli import renamed_override

    assert renamed_override(["model=relu", "stages=[lower]"]) is None
    line = renamed_override(["model=relu", "targets=[lower]"])
    assert line is not None and "`targets=` is now `stages=`" in line and "stages=[lower]" in line
    assert renamed_override(["+targets=[extract]"]).endswith("stages=[extract]")


def test_a_planner_chosen_as_a_policy_says_the_new_key() -> None:
    from pimbuild.commands.cli import renamed_override

    assert renamed_override(["system=gpus", "gpus.planner=latency"]) is None
    assert renamed_override(["policy=torchpim", "policy.name=oracle"]) is None
    for old in ("policy=latency", "policy.name=throughput", "policy=throughput,latency"):
        line = renamed_override(["system=gpus", old])
        assert line is not None and f"gpus.planner={old.partition('=')[2]}" in line, old


@pytest.mark.slow
def test_cli_old_stage_list_name_is_one_line(tmp_path: Path) -> None:
    proc = run_cli(["model=relu", "targets=[lower]"], cwd=tmp_path)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error:") and "stages=[lower]" in line
    assert not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_cli_bad_type_fails_at_composition(tmp_path: Path) -> None:
    proc = run_cli(["pim.cores=abc"], cwd=tmp_path)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error:") and "pim.cores=abc" in line and "Integer" in line


@pytest.mark.slow
def test_cli_names_the_syntax_of_a_group_chosen_under_another_name(tmp_path: Path) -> None:
    proc = run_cli(["system=gpus", "tp_link=rdma200"], cwd=tmp_path)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert line.endswith("tp_link is chosen from the link group: link@tp_link=rdma200")


@pytest.mark.slow
def test_cli_bad_override_syntax_is_one_line(tmp_path: Path) -> None:
    proc = run_cli(["pim.cores=["], cwd=tmp_path)
    assert proc.returncode == 1
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error:") and "'['" in line


@pytest.mark.parametrize(("override", "choices"), [
    ("lowering.fusion=some", "controlled, full, none"),
    ("policy.name=greedy9", "cpu, joint, operator, oracle, torchpim"),
    ("profile.backend=perf9", "papi, timer, valgrind"),
    ("sim.copy_model=lazy9", "resident, upper_bound"),
    ("system.name=fpga9", "pim"),
    ("lowering.weights=heap", "args, constants"),
    ("policy.c1=sometimes", "paper, model"),
    ("policy.c4=always", "paper, read_later"),
])
def test_unknown_plugin_name_lists_the_choices(run_build, store: Path, override: str,
                                               choices: str) -> None:
    with pytest.raises(ConfigError, match=choices):
        run_build(["model=relu", override])
    assert store_entries(store) == []


def test_bad_plugin_import_path(run_build, store: Path) -> None:
    with pytest.raises(ConfigError, match="policy.name 'nowhere.at_all:place' cannot be "
                                          "loaded"):
        run_build(["model=relu", "policy.name=nowhere.at_all:place"])
    assert store_entries(store) == []


def test_missing_recipe_module(run_build, store: Path) -> None:
    with pytest.raises(ConfigError, match="model.recipe 'nowhere9.net:build' cannot be found"):
        run_build(["model=relu", "model.recipe=nowhere9.net:build"])
    assert store_entries(store) == []


def test_recipe_in_a_module_without_source(run_build, store: Path, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"model.recipe 'os:getcwd' cannot be found: module "
                                          r"'os' has no source file on disk \(frozen\)"):
        run_build(["model=relu", "model.recipe=os:getcwd"])
    archive = tmp_path / "zipped.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("zipped_recipe.py", "def build(n):\n    raise AssertionError\n")
    monkeypatch.syspath_prepend(str(archive))
    with pytest.raises(ConfigError, match=r"module 'zipped_recipe' has no source file on disk "
                                          r"\(.*zipped.zip.zipped_recipe.py\)"):
        run_build(["model=relu", "model.recipe=zipped_recipe:build"])
    assert store_entries(store) == []


@pytest.mark.parametrize(("override", "message"), [
    ("pim.cores=-4", r"pim.cores must be >= 1 \(got -4\)"),
    ("pim.cores=0", r"pim.cores must be >= 1 \(got 0\)"),
    ("pim.freq_ghz=0", r"pim.freq_ghz must be > 0 \(got 0.0\)"),
    ("pim.freq_ghz=-1", r"pim.freq_ghz must be > 0"),
    ("policy.theta_ratio=-1", r"policy.theta_ratio must be >= 0"),
    ("policy.theta_ratio=nan", r"policy.theta_ratio must be a finite number \(got nan\)"),
    ("pim.freq_ghz=nan", r"^pim.freq_ghz must be a finite number \(got nan\): give a value > 0$"),
    ("profile.repetitions=0", r"profile.repetitions must be >= 1"),
    ("platform.b_mem_gbps=inf", r"platform.b_mem_gbps must be a finite number \(got inf\)"),
    ("pim.freq_ghz=-inf", r"pim.freq_ghz must be a finite number \(got -inf\)"),
    ("sim.cores_sweep=[32,-1]", r"sim.cores_sweep must be >= 1 \(got -1\)"),
    ("lowering.register_block_candidates=[]",
     r"lowering.register_block_candidates is empty: name at least one"),
    ("stages=[]", r"stages is empty"),
    ("profile.auto=[]", r"profile.auto is empty"),
])
def test_out_of_range_value_fails_before_any_stage(run_build, store: Path, override: str,
                                                    message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        run_build(["model=relu", override])
    assert store_entries(store) == []


@pytest.mark.slow
def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path) -> None:
    import os
    import signal
    import sys
    import time

    from tests.conftest import REPO

    store = tmp_path / "store"
    exe = Path(sys.executable).parent / "pimbuild"
    proc = subprocess.Popen([str(exe), "model=softmax", f"store={store}",
                             f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(REPO),
                                 "PYTHONFAULTHANDLER": "1"},  # a crash shows its stack
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(4.0)  # inside lower
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, out + err
    assert err.count("error:") == 1 and "interrupted" in err
    assert "Traceback" not in out + err
    _assert_store_clean(store)


def _python(code: str, module: tuple[Path, str] | None = None) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter at the repository root; ``module``: (folder, text)
    of ``imported_module.py``, put on the path with the interrupt handler installed first."""
    import sys

    from tests.conftest import REPO

    if module is not None:
        folder, text = module
        (folder / "imported_module.py").write_text(text)
        code = (f"import sys\nsys.path.insert(0, {str(folder)!r})\n"
                "from pimbuild.commands import cli\ncli.defer_interrupts_in_imports()\n" + code)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


def test_ctrl_c_while_hydra_composes_is_one_line_and_exit_130() -> None:
    """Ctrl-C while Hydra composes the config (``cli.main``): one line, exit 130, no
    traceback. The interrupt is raised inside that phase, so the test does not depend on
    timing."""
    proc = _python("from pimbuild.commands import cli\n"
                   "def app():\n"
                   "    raise KeyboardInterrupt\n"
                   "cli.app = app\n"
                   "cli.main()\n")
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert proc.stderr.count("error:") == 1 and "interrupted before the build" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_ctrl_c_during_an_import_waits_until_the_import_is_over(tmp_path: Path) -> None:
    """Torch is imported inside the first stage: an interrupt that comes while a module is
    imported is raised once its import is over (``cli.on_interrupt``), never inside the
    module's initialisation. The module sends SIGINT to its own process, so the test does
    not depend on timing."""
    proc = _python("import time\n"
                   "try:\n"
                   "    import imported_module\n"
                   "    time.sleep(10)\n"
                   "    print('not interrupted')\n"
                   "except KeyboardInterrupt:\n"
                   "    print('interrupted after the import:', 'imported_module' in sys.modules)\n",
                   (tmp_path, "import os, signal, time\n"
                              "os.kill(os.getpid(), signal.SIGINT)\n"
                              "time.sleep(0.5)\n"
                              "print('module initialised', flush=True)\n"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines() == ["module initialised",
                                        "interrupted after the import: True"], proc.stdout


def test_a_second_ctrl_c_during_an_import_leaves_at_once(tmp_path: Path) -> None:
    """An import that does not end (a hang): the second Ctrl-C leaves at once, one line and
    exit 130, without raising inside the module."""
    proc = _python("import imported_module\n",
                   (tmp_path, "import os, signal, time\n"
                              "os.kill(os.getpid(), signal.SIGINT)\n"
                              "time.sleep(0.2)\n"
                              "os.kill(os.getpid(), signal.SIGINT)\n"
                              "time.sleep(10)\n"
                              "print('module initialised', flush=True)\n"))
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert proc.stderr.count("error:") == 1 and "interrupted twice" in proc.stderr
    assert "Traceback" not in proc.stderr and "initialised" not in proc.stdout


@pytest.mark.parametrize(("recipe", "message"), [
    ("tests.bad_recipes:not_a_recipe", "returned tuple, not a pimbuild.recipes.Recipe"),
    ("tests.bad_recipes:scalar_output", r"cannot be exported: .* a Python number it computes: "
                                        r"\.item\(\), float\(t\), depends on a tensor's values"),
    ("tests.bad_recipes:half_output", "output 0 has dtype float16"),
    ("tests.bad_recipes:returns_a_cache",
     "output 1 of the forward is a KeyValueCache; .* unless use_cache=False"),
    ("tests.bad_recipes:no_such_builder", "cannot be loaded: AttributeError"),
    ("tests.broken_module:build", "cannot be loaded: ZeroDivisionError"),
    ("tests.bad_recipes:same_output_twice", "output 1 is the same tensor as an earlier"),
    ("tests.bad_recipes:writes_its_input", "writes its input 'x' in place; clone it first"),
    ("tests.bad_recipes:draws_random_numbers",
     r"draws random numbers \(aten.randn_like.default in 'noise'\)"),
    ("tests.bad_recipes:float_in_dict", r"a Python number it computes: .* keep such a value a "
                                        r"tensor"),
    ("tests.bad_recipes:string_output", "output 1 of the forward is a str; pimbuild needs every "
                                        "output to be a tensor"),
    ("tests.bad_recipes:data_dependent_shape",
     r"the shape of aten.masked_select.default's result depends on the values of its input"),
    ("tests.bad_recipes:branches_on_values", "control flow, .* depends on a tensor's values"),
    ("tests.bad_recipes:dynamically_quantized",
     r"'0._packed_params._packed_params' is a TorchScript object \(__torch__.torch.classes."
     r"quantized.LinearPackedParamsBase\)"),
    ("tests.bad_recipes:scripted_submodule", r"'0' is a TorchScript module \(torch.jit.script"),
    ("tests.bad_recipes:writes_its_parameter",
     r"writes its parameter 'weight' in place \(as nn.Embedding with max_norm"),
    ("tests.bad_recipes:uses_cond", r"torch-mlir: .*; the forward uses "
                                    r"torch.ops.higher_order.cond in 'branch', control flow"),
    ("tests.bad_recipes:number_input", "input 'k' is a int; pimbuild needs every input to be"),
    ("tests.bad_recipes:uint16_input", "input 'x' has dtype uint16, which the lowered "
                                       r"program cannot take \(supported: float32"),
    ("tests.bad_recipes:complex_fft", r"aten.fft_rfft.default has no rule for complex tensors "
                                      r"\(pimbuild computes complex tensors as pairs of real"),
    ("tests.bad_recipes:side_effects", "calls aten._linalg_check_errors.default, an op with side"),
    ("tests.bad_recipes:zero_layers", "recipe's layers is 0; it must be a whole number >= 1"),
    ("tests.bad_recipes:fractional_tokens", "recipe's tokens is 2.5; it must be a whole number"),
    ("tests.bad_recipes:unknown_unit", "recipe's unit is 'images'; choose from tokens, requests"),
    ("tests.bad_recipes:carry_of_no_input",
     "recipe's carry names input 'y', but the forward's inputs are x"),
    ("tests.bad_recipes:state_of_no_output",
     "recipe's state feeds input 'x' from output 1, but the forward returns 1 output"),
    ("tests.bad_recipes:carry_of_another_shape", r"recipe's carry feeds input 'x' \(float32 "
     r"\[2, 16\]\) from output 0 \(float32 \[2, 8\]\); they must have one shape and dtype"),
])
def test_recipe_that_returns_the_wrong_thing(run_build, store: Path, recipe: str,
                                             message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        run_build(["model=relu", f"model.recipe={recipe}", "model.size={n:8}"])
    _assert_store_clean(store)
    assert not any((store / "lower").iterdir())


def test_absurd_size_is_one_line(run_build, store: Path) -> None:
    with pytest.raises(RecipeError) as err:
        run_build(["model=relu", "model.size.n=1000000000000000"])
    assert "\n" not in str(err.value)


def test_a_module_llvm_cannot_compile_is_a_stage_error() -> None:
    from torch_mlir import ir

    from pimbuild.codegen import jit
    from pimbuild.frontend import mlir

    with mlir.new_context():
        module = ir.Module.parse("func.func @f() { return }")  # not in the LLVM dialect
    with pytest.raises(StageError, match="LLVM could not compile the lowered module"):
        jit.engine_of(module)
