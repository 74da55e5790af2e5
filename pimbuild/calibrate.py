"""Task ``calibrate``: the host's single-thread streaming read bandwidth ``B_cpu``.

Measured through the same path as every candidate: ``recipes.calibration:stream_read`` is
lowered, instrumented and timed with the marker runtime; ``B_cpu`` is the bytes its reduction
nest reads divided by that nest's median time. The paper carries its threshold across hosts
as ``theta = theta_ratio * B_cpu`` (0.12 x 16.754 GB/s = 2.0 GB/s on its host). When the
platform config sets ``b_cpu_gbps``, that value is used and nothing is measured.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pimbuild import extract, instrument, jit, lower, profile
from pimbuild.runtime import LIBRARY, Markers

RECIPE = "recipes.calibration:stream_read"


@dataclass(frozen=True)
class CalibrateParams:
    b_cpu_gbps: float | None = None  # set: use it, measure nothing
    buffer_mib: int = 512  # larger than the last-level cache, so reads stream from memory
    repetitions: int = 10
    warmup: int = 2
    register_block: int = 16  # lowering.register_block: compiled as the candidates are


def _kernel(p: CalibrateParams) -> lower.LowerParams:
    cols = 16384
    rows = max(1, p.buffer_mib * (1 << 20) // (4 * cols))
    return lower.LowerParams(name="calibrate", recipe=RECIPE, size={"rows": rows, "cols": cols})


def measure(p: CalibrateParams, runtime_dir: Path, work: Path) -> dict:
    """Lower, instrument and time the streaming kernel; B_cpu from its reduction nest."""
    lp = _kernel(p)
    lower.run(lp, work, work / "failure")
    extract.run(work / "scf.mlir", work / "signature.json", work)
    instrument.run(work / "scf.mlir", work / "candidates.json", runtime_dir / LIBRARY,
                   p.register_block, work, work / "failure")
    inp = profile.Inputs.from_artifacts(lp, work, work, work, runtime_dir)
    markers = Markers(runtime_dir / LIBRARY)
    engine = jit.load_llvm(inp.llvm_path, markers.symbols)
    args, _ = lower.materialize(lp, inp.signature)
    rows, _ = profile.timing_run(engine, markers, inp, args,
                                 profile.ProfileParams(repetitions=p.repetitions,
                                                       warmup=p.warmup))
    nest = max(inp.candidates, key=lambda c: sum(c["reads"].values()))
    seconds = next(r for r in rows if r["id"] == nest["id"])
    read_bytes = sum(nest["reads"].values())
    return {"b_cpu_gbps": read_bytes / seconds["median_s"] / 1e9, "source": "measured",
            "bytes_read": read_bytes, "median_s": seconds["median_s"],
            "iqr_s": seconds["iqr_s"], "nest_id": nest["id"], "kernel": RECIPE,
            "size": lp.size}


def run(p: CalibrateParams, runtime_dir: Path, out_dir: Path) -> None:
    if p.b_cpu_gbps is not None:
        result = {"b_cpu_gbps": p.b_cpu_gbps, "source": "config (platform.b_cpu_gbps)"}
    else:
        work = out_dir / "kernel"
        work.mkdir()
        result = measure(p, runtime_dir, work)
        for big in ("torch.mlir", "linalg.mlir"):  # keep scf / llvm level for review
            (work / big).unlink(missing_ok=True)
    (out_dir / "calibrate.json").write_text(json.dumps(result, indent=2) + "\n")


def b_cpu(calibrate_dir: Path) -> float:
    return float(json.loads((calibrate_dir / "calibrate.json").read_text())["b_cpu_gbps"])
