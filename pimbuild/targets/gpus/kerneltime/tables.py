"""Kernel-time tables: measured kernel times that travel between machines (docs/gpus.md).

A table is one JSON file for one device: the catalogue device it measures (``device``, the
name in ``pimbuild/conf/device``), the GPU, driver and torch version it ran on, how it was
measured, and
``kernels``: key -> seconds. A key is what determines a kernel's time on a given GPU: its
class, the linalg op, its iteration count, its FLOPs, the sizes of what it reads and writes
(IR bytes, sorted) and the served precision (``key``); two models' kernels of the same shape
share a key. ``pimbuild-kernels export`` writes a build's measured device as a table,
``pimbuild-kernels merge`` joins tables of one device from several builds or machines, and
``gpus.backend=table`` with ``gpus.tables=[...]`` plans from them: a kernel a table has
is measured, the others come from the fitted model, and ``profile.json`` counts both.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import StringConstraints

from pimbuild.core.errors import ConfigError
from pimbuild.core.schema import Range, Strict, check, number

FORMAT = "pimbuild-kernel-table/1"
META = ("device", "gpu", "driver", "torch", "cuda", "precision", "method")
# A kernel's time in seconds: above zero (a kernel takes time) and at most an hour (a table
# entry past that is a unit slip, not a measurement).
SECONDS: Range = (">", 0, 3600)


class Table(Strict):
    """A kernel-time table's fields (the module's docstring)."""

    format: Literal["pimbuild-kernel-table/1"]
    device: Annotated[str, StringConstraints(min_length=1)]  # a catalogue device's name
    gpu: str = ""
    driver: str = ""
    torch: str = ""
    cuda: str = ""
    precision: str = ""
    method: str = ""
    kernels: dict[str, number(SECONDS)]


def key(kernel: dict[str, Any], precision: str) -> str:
    """What determines a kernel's time (see the module's docstring)."""
    reads = ",".join(str(n) for n in sorted(kernel["reads"].values()))
    writes = ",".join(str(n) for n in sorted(kernel["writes"].values()))
    return (f"{kernel['kind']}|{kernel['op']}|{kernel.get('iterations', 0)}|"
            f"{kernel.get('flops', 0)}|r{reads}|w{writes}|{precision}")


def make(meta: dict[str, Any], kernels: list[dict[str, Any]], seconds: list[float],
         precision: str) -> dict[str, Any]:
    """A table of ``kernels`` (extract's) timed at ``seconds`` on ``meta['device']``."""
    rows = {}
    for k, t in zip(kernels, seconds, strict=True):
        rows.setdefault(key(k, precision), float(t))
    return {"format": FORMAT, **{m: meta.get(m, "") for m in META},
            "precision": precision, "kernels": rows}


def write(table: dict[str, Any], path: Path) -> None:
    """Write ``table``, checked first (``Table``): a bug cannot write an invalid one."""
    check(Table, table, f"the kernel-time table for {path}")
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(table, indent=1) + "\n")
    tmp.replace(path)


def load(path: Path) -> dict[str, Any]:
    """A table; a ConfigError naming the file if it is missing, truncated or not a valid
    table (``Table``)."""
    try:
        table = json.loads(Path(path).read_text())
    except OSError as e:
        raise ConfigError(f"kernel-time table {path}: {e.strerror}") from None
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"kernel-time table {path} is corrupted or truncated (not JSON: "
                          f"{e})") from None
    if not isinstance(table, dict) or table.get("format") != FORMAT:
        raise ConfigError(f"{path} is not a kernel-time table ({FORMAT}; "
                          f"`pimbuild-kernels export` writes them)")
    return check(Table, table, f"kernel-time table {path}").model_dump()


def merge(tables: list[dict[str, Any]], names: list[str]) -> tuple[dict[str, Any], int]:
    """One table of the kernels of ``tables`` (all of one device); a key in several keeps
    the least time (the estimator the backends use). Returns it and how many keys repeated."""
    devices = {t["device"] for t in tables}
    if len(devices) != 1:
        raise ConfigError("tables of different devices cannot merge: " + ", ".join(
            f"{n} ({t['device']})" for n, t in zip(names, tables, strict=True)))
    out = {**tables[0], "kernels": {}}
    for m in META:
        values = sorted({str(t.get(m, "")) for t in tables})
        out[m] = values[0] if len(values) == 1 else " | ".join(values)
    repeated = 0
    for t in tables:
        for k, s in t["kernels"].items():
            repeated += k in out["kernels"]
            out["kernels"][k] = min(s, out["kernels"].get(k, s))
    return out, repeated


def for_device(tables: list[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The (merged) table of the catalogue device called ``name``, None if no table has it."""
    mine = [t for t in tables if t["device"] == name]
    return merge(mine, [name] * len(mine))[0] if mine else None


def versions_differ(tables: list[dict[str, Any]], local_torch: str = "") -> list[str]:
    """Warnings for tables measured under different drivers or torch versions, or under a
    torch release other than ``local_torch`` (this process's: the kernels the program would
    launch are that release's)."""
    notes = []
    for field in ("driver", "torch"):
        values = sorted({str(t.get(field, "")) for t in tables})
        if len(values) > 1:
            notes.append(f"kernel-time tables come from different {field} versions "
                         f"({', '.join(values)}): their times may not compare")
    release = local_torch.split("+")[0]
    other = sorted({str(t.get("torch", "")) for t in tables
                    if t.get("torch") and str(t["torch"]).split("+")[0] != release})
    if release and other:
        notes.append(f"kernel-time tables measured under torch {', '.join(other)}; this "
                     f"pimbuild runs torch {local_torch}")
    return notes
