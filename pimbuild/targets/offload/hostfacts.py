"""What stage ``calibrate`` settled for this host, read by the stages after it from its
``calibrate.json``: ``B_cpu`` and the register-blocking factor. Kept apart from
``pimbuild.targets.offload.calibrate``, which lowers, instruments and times a kernel and so
sits above the
stages that read its result."""

from __future__ import annotations

import json
from pathlib import Path


def b_cpu(calibrate_dir: Path) -> float:
    """The host's single-thread streaming read bandwidth, GB/s."""
    return float(json.loads((calibrate_dir / "calibrate.json").read_text())["b_cpu_gbps"])


def chosen_block(calibrate_dir: Path) -> int:
    """The register-blocking factor calibrate settled for this host."""
    return int(json.loads((calibrate_dir / "calibrate.json").read_text())
               ["register_block"]["value"])


def resolved_block(configured: int | None, calibrate_dir: Path) -> int:
    """The configured factor (``lowering.register_block``), or (None) the one calibrate
    chose on this host."""
    return configured or chosen_block(calibrate_dir)
