"""The GPU target's timeline (``timeline=true``): the discrete-event simulation drawn kernel
by kernel, transfer by transfer and request by request, in the Trace Event format."""

from __future__ import annotations

import json

import pytest

from pimbuild.core.trace import check
from tests.conftest import artifact_dir
from tests.targets.offload.test_timeline import _lanes


@pytest.mark.slow
@pytest.mark.parametrize("model", ["mlp", "llama3_8b"])
def test_the_gpu_target_draws_its_simulation(run_build, model: str) -> None:
    """mlp: pipelined forwards of the planned placement, kernel by kernel; llama3_8b (with a
    prefill phase): the serving simulation's requests, forwards and transfers."""
    result = run_build(["system=gpus", f"model={model}", "devices=[a100,l40s]",
                        "timeline=true", "serve.requests=12", "serve.depth=3"])
    out = artifact_dir(result, "simulate")
    report = json.loads((out / "report.json").read_text())
    counts = check(out / "timeline.json")
    assert counts == report["timeline"]["events"] and counts["kernel"] > 0
    lanes = set(_lanes(out / "timeline.json").values())
    assert {"a100", "l40s"} <= lanes
    if model == "llama3_8b":
        assert counts["request"] == 2 * 12 and "request 11" in lanes
    else:
        assert counts["request"] == 3  # serve.depth forwards, pipelined
        assert counts["kernel"] == 3 * report["kernels"] * report["layers"]
