"""Golden checks on scf.mlir with the filecheck package (LLVM FileCheck syntax)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CHECKS = Path(__file__).parent / "filecheck"
CASES = {
    "softmax_none.mlir": ["model=softmax", "model.size.rows=4", "model.size.cols=16",
                          "lowering.fusion=none"],
    "softmax_controlled.mlir": ["model=softmax", "model.size.rows=4", "model.size.cols=16",
                                "lowering.fusion=controlled"],
    "gemv_none.mlir": ["model=gemv", "model.size.m=8", "model.size.n=16",
                       "lowering.fusion=none"],
}


@pytest.mark.parametrize("check", sorted(CASES))
def test_scf_matches_golden_checks(run_build, check: str) -> None:
    result = run_build([*CASES[check], "stages=[lower]"])
    scf = Path(result.manifest["stages"]["lower"]["dir"]) / "scf.mlir"
    filecheck = Path(sys.executable).parent / "filecheck"
    proc = subprocess.run([str(filecheck), str(CHECKS / check)], input=scf.read_text(),
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
