"""Every input checked at the door, found by a fuzzer rather than a list: hypothesis makes bad
and edge values for every field of every file format pimbuild reads (kernel-time tables,
device files, ops CSVs, traces, fits) and for every key of the config, and each is read the
way a build or a command reads it. The answer is a sound result, or one ``error:`` line (a
ConfigError); never a traceback, never an invalid value let through.

Hypothesis' profile (``conftest.py``) is ``quick`` under ``-m "not slow"`` and ``full``
otherwise, both from a fixed seed; ``PIMBUILD_FUZZ=explore`` searches further."""

from __future__ import annotations

import json
import math
import re
import threading
from pathlib import Path

import pytest
import yaml
from hydra.errors import HydraException
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf.errors import OmegaConfBaseException

from pimbuild.build import config
from pimbuild.build.graph import plan
from pimbuild.commands import cli
from pimbuild.core.artifacts import Store
from pimbuild.core.errors import ConfigError
from pimbuild.targets.gpus.kerneltime import cli as kcli
from pimbuild.targets.gpus.kerneltime import model, ops, tables
from pimbuild.targets.gpus.systems import arrivals
from tests.conftest import REPO, make_cfg

# Values a field may be given by mistake or at an edge: every JSON/YAML type, numbers at and
# past every bound, the non-finite ones, text that looks like a number.
EDGE_NUMBERS = st.sampled_from([0, -1, 1, -0.0, 1e-30, 1e30, -1e30, 3600, 3600.5, 2**31,
                                2**63, 0.5, float("inf"), float("-inf"), float("nan")])
BAD = st.one_of(st.none(), st.booleans(), EDGE_NUMBERS, st.integers(), st.floats(),
                st.text(max_size=8), st.sampled_from(["12", "1e3", "fast", "inf", ".nan", ""]),
                st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                     st.integers(), max_size=2))
SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                          HealthCheck.too_slow])


def one_line(e: Exception) -> None:
    text = str(e)
    assert text and "\n" not in text and "Traceback" not in text, text


def answered(read, path: Path):
    """``read(path)``, or None where it refused the file in one line (a ConfigError)."""
    try:
        return read(path)
    except ConfigError as e:
        one_line(e)
        return None


def mutate(record: dict, data: st.DataObject, fields: list[str]) -> dict:
    """``record`` with one field given a bad value, dropped, or one unknown field added."""
    out = dict(record)
    how = data.draw(st.sampled_from(["value", "drop", "add"]))
    name = data.draw(st.sampled_from(fields))
    if how == "value":
        out[name] = data.draw(BAD)
    elif how == "drop":
        out.pop(name, None)
    else:
        out[data.draw(st.text(min_size=1, max_size=6))] = data.draw(BAD)
    return out


# -- kernel-time tables ---------------------------------------------------------------------
TABLE = {"format": tables.FORMAT, "device": "A100-80GB-SXM", "gpu": "", "driver": "",
         "torch": "", "cuda": "", "precision": "bf16", "method": "",
         "kernels": {"gemm|matmul|1|2|r4|w2|bf16": 1e-5}}


@SETTINGS
@given(data=st.data())
def test_a_kernel_time_table_is_sound_or_one_error(tmp_path: Path, data) -> None:
    table = mutate(TABLE, data, list(TABLE))
    if data.draw(st.booleans()):  # a bad time instead
        table = {**TABLE, "kernels": {"k": data.draw(BAD)}}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(table, allow_nan=True))
    got = answered(tables.load, path)
    if got is None:
        return
    assert got["format"] == tables.FORMAT and isinstance(got["device"], str) and got["device"]
    for t in got["kernels"].values():
        assert type(t) is float and 0 < t <= 3600


def test_a_poisoned_table_is_refused_before_any_stage(tmp_path: Path) -> None:
    """What the store's promise rests on: a table holding ``true``, ``Infinity``, ``1e30`` or
    a foreign device is refused while the build is planned, and the store stays empty."""
    store = tmp_path / "artifacts"
    for bad, match in ((True, "must be a number"), (float("inf"), "finite"),
                       (1e30, "<= 3600"), ("foreign", "no device of devices=")):
        table = {**TABLE, "kernels": {"k": bad}} if bad != "foreign" \
            else {**TABLE, "device": "B200"}
        path = tmp_path / "t.json"
        path.write_text(json.dumps(table))
        cfg = make_cfg(store, ["system=gpus", "model=mlp", "gpus.backend=table",
                               f"gpus.tables=[{path}]"])
        with pytest.raises(ConfigError, match=match) as e:
            plan(cfg, Store(store), tmp_path / "failure")
        one_line(e.value)
        assert not store.exists()


def test_tables_without_the_table_backend_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(TABLE))
    cfg = make_cfg(tmp_path / "s", ["system=gpus", "model=mlp", f"gpus.tables=[{path}]"])
    with pytest.raises(ConfigError, match="read only by gpus.backend=table"):
        plan(cfg, Store(tmp_path / "s"), tmp_path / "failure")


# -- device files and ops CSVs, as pimbuild-kernels predict reads them ----------------------
DEVICE = yaml.safe_load((REPO / "pimbuild" / "conf" / "device" / "l40s.yaml").read_text())
DEVICE.pop("defaults")
OPS = "op,dtype,b,m,n,k,h,g\nlinear,bf16,1,64,4096,4096,,\nrelu,bf16,64,,,,4096,\n"


def predict(tmp_path: Path, capsys, device: dict | None = None, ops_text: str = OPS) -> None:
    """Run ``pimbuild-kernels predict``; assert a sound CSV or one error line, nothing
    written."""
    (tmp_path / "device").mkdir(exist_ok=True)
    (tmp_path / "device" / "mine.yaml").write_text(yaml.safe_dump(device or DEVICE))
    (tmp_path / "ops.csv").write_text(ops_text)
    out = tmp_path / "out.csv"
    out.unlink(missing_ok=True)
    status = kcli.main(["predict", str(tmp_path / "ops.csv"), "--device", "mine",
                        "--config-dir", str(tmp_path), "--out", str(out)])
    err = capsys.readouterr().err
    if status == 0:
        rows = out.read_text().splitlines()[1:]
        assert rows
        for line in rows:
            t = float(line.split(",")[8])  # time_us
            assert math.isfinite(t) and t > 0, line
    else:
        assert status == 1 and not out.exists()
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), err


@SETTINGS
@given(data=st.data())
def test_a_device_file_is_sound_or_one_error(tmp_path: Path, capsys, data) -> None:
    predict(tmp_path, capsys, device=mutate(DEVICE, data, list(DEVICE)))


@SETTINGS
@given(data=st.data())
def test_an_ops_csv_is_sound_or_one_error(tmp_path: Path, capsys, data) -> None:
    row = {"op": "linear", "dtype": "bf16", "b": 1, "m": 64, "n": 4096, "k": 4096}
    row = mutate(row, data, [*ops.COLUMNS, "time_us"])
    header = list(row)
    text = ",".join(map(str, header)) + "\n" + ",".join(
        "" if row[c] is None else str(row[c]).replace(",", ";").replace("\n", " ")
        for c in header) + "\n"
    if data.draw(st.booleans()):  # or a file cut short: empty, or only its header
        text = data.draw(st.sampled_from(["", "op,dtype,b,m,n,k,h,g\n"]))
    predict(tmp_path, capsys, ops_text=text)


# -- fitted kernel-time models --------------------------------------------------------------
FIT = json.loads(model.SHIPPED.read_text())


@SETTINGS
@given(data=st.data())
def test_a_fit_file_is_sound_or_one_error(tmp_path: Path, data) -> None:
    physics = mutate(FIT["physics"], data, list(FIT["physics"]))
    fit = mutate({**FIT, "physics": physics}, data, ["provenance", "learned", "booster"]) \
        if data.draw(st.booleans()) else {**FIT, "physics": physics}
    path = tmp_path / f"fit{data.draw(st.integers(0, 10**9))}.json"
    path.write_text(json.dumps(fit, allow_nan=True))
    fitted = answered(model.load, path)
    if fitted is None:
        return
    o = ops.Op("linear", "bf16", 1, 64, 4096, 4096)
    t = fitted.predict([o], [ops.gpu_of(DEVICE)])[0]
    assert math.isfinite(t) and t > 0


# -- request traces -------------------------------------------------------------------------
@SETTINGS
@given(data=st.data())
def test_a_trace_is_sound_or_one_error(tmp_path: Path, data) -> None:
    row = mutate({"arrival_s": 0.5, "input_tokens": 10, "output_tokens": 3}, data,
                 ["arrival_s", "input_tokens", "output_tokens"])
    if data.draw(st.booleans()):
        path = tmp_path / "t.jsonl"
        path.write_text(json.dumps(row) + "\n")
    else:
        path = tmp_path / "t.csv"
        path.write_text(",".join(row) + "\n" + ",".join(
            str(v).replace(",", ";").replace("\n", " ") for v in row.values()) + "\n")
    got = answered(arrivals.trace, path)
    if got is None:
        return
    for r in got:
        assert math.isfinite(r.arrival_s) and r.arrival_s >= 0
        assert type(r.input_tokens) is int and r.input_tokens >= 0
        assert type(r.output_tokens) is int and r.output_tokens >= 1


# -- the config's keys ---------------------------------------------------------------------
def leaves(node: object, prefix: str = "") -> list[str]:
    """Every leaf key of a composed config (lists and mappings as one key each)."""
    from omegaconf import DictConfig

    if not isinstance(node, DictConfig) or not node.keys():
        return [prefix]
    return [leaf for k in node.keys() for leaf in leaves(node._get_node(k), f"{prefix}{k}.")
            if k != "experiment"]


GPU_GROUPS = ("device", "link", "tp_link", "gpus", "serve", "devices")
KEYS = sorted({k.rstrip(".") for k in leaves(make_cfg(Path("unused"), []))
               if not k.startswith("device.") or k.startswith("device.l40s.")})
VALUES = ["inf", "-inf", "nan", "1e30", "-1", "0", "true", "abc", "'12'", "null", "[]", "1.5",
          "[a100]", "{}", "''"]


@SETTINGS
@given(key=st.sampled_from(KEYS), value=st.sampled_from(VALUES))
def test_every_key_of_the_config_is_checked_when_planned(tmp_path: Path, key: str,
                                                         value: str) -> None:
    system = "system=gpus" if key.split(".")[0] in GPU_GROUPS else "system=pim"
    store = tmp_path / "artifacts"
    try:
        cfg = make_cfg(store, [system, f"{key}={value}"])
        plan(cfg, Store(store), tmp_path / "failure")
    except ConfigError as e:
        one_line(e)
    except (HydraException, OmegaConfBaseException) as e:  # composition: the CLI's one line
        one_line(ValueError(cli.composition_error_line(e)))
    assert not (store.exists() and any(store.iterdir()))


@SETTINGS
@given(key=st.sampled_from(["model", "pim.cores", "gpus.planner", "serve.rate", "devices",
                            "device.l40s.sms", "platform", "lowering.fusion"]),
       edit=st.sampled_from(["swap", "drop", "add", "case"]), at=st.integers(0, 20))
def test_an_unknown_key_gets_the_nearest_real_one(key: str, edit: str, at: int) -> None:
    head, _, last = key.rpartition(".")
    i = at % len(last)
    wrong = {"swap": last[:i] + last[i + 1:i + 2] + last[i:i + 1] + last[i + 2:],
             "drop": last[:i] + last[i + 1:], "add": last[:i] + "x" + last[i:],
             "case": last.upper()}[edit]
    path = f"{head}.{wrong}" if head else wrong
    line = config.unknown_key(path)
    if line is None:  # no edit (a one-letter name), or another real key (devices -> device)
        return
    assert "\n" not in line and "append" not in line
    suggested = re.findall(r"did you mean `([^`]+)=`", line)
    if edit != "case":  # one edit away: a suggestion, and a key the schema has
        assert suggested and config.unknown_key(suggested[0]) is None, line
    for arg in (f"{path}=1", f"+{path}=1"):
        assert cli.unknown_override([arg]) == line


def test_real_keys_and_free_mappings_pass() -> None:
    for key in ["model", "model.size.n", "system.params.anything", "device.l40s.sms",
                "device.mine.tdp_w", "experiment.points", "hydra.run.dir", "hydra/launcher"]:
        assert cli.unknown_override([f"+{key}=1"]) is None, key


# -- run folders ----------------------------------------------------------------------------
def test_builds_in_one_second_get_a_folder_each(tmp_path: Path) -> None:
    base = str(tmp_path / "runs" / "relu" / "2026-12-05_12-00-00")
    got: list[str] = []
    workers = [threading.Thread(target=lambda: got.append(cli.unique_dir(base)))
               for _ in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(set(got)) == 8 and base in got
    assert sorted(Path(g).name for g in got)[1:] == [f"2026-12-05_12-00-00_{n}"
                                                     for n in range(2, 9)]


# -- Hugging Face model configs, as pimbuild-serve reads them -------------------------------
HF = {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2,
      "num_hidden_layers": 2, "intermediate_size": 512, "vocab_size": 1000,
      "torch_dtype": "bfloat16", "num_local_experts": 4, "num_experts_per_tok": 2}


@SETTINGS
@given(data=st.data())
def test_a_model_config_is_sound_or_one_error(tmp_path: Path, data) -> None:
    from pimbuild.targets.gpus.enginesim import shape

    path = tmp_path / "config.json"
    path.write_text(json.dumps(mutate(HF, data, list(HF)), allow_nan=True))
    m = answered(shape.load, path)
    if m is None:
        return
    assert m.heads % m.kv_heads == 0 and m.weight_bytes > 0 and m.layers >= 1
    assert not m.moe or 1 <= m.top_k <= m.experts


@pytest.mark.slow
def test_two_builds_started_together_keep_both_records(tmp_path: Path) -> None:
    """Two builds of one model started at once, with the default run folder
    (``outputs/runs/<model>/<time>``): each keeps its own ``build.json`` and
    ``manifest.json``."""
    import os
    import subprocess
    import sys

    exe = Path(sys.executable).parent / "pimbuild"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([str(exe), "model=relu", "stages=[lower]"], cwd=tmp_path, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for _ in range(2)]
    assert [p.wait(timeout=600) for p in procs] == [0, 0]
    runs = sorted((tmp_path / "outputs" / "runs" / "relu").iterdir())
    assert len(runs) == 2, runs  # started in one second or not, two folders
    for run in runs:
        assert json.loads((run / "build.json").read_text())["executed"] + \
            json.loads((run / "build.json").read_text())["cached"] == ["lower"]
        assert "lower" in json.loads((run / "manifest.json").read_text())["stages"]
