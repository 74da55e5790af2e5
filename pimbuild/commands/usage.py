"""What ``pimbuild --help`` and ``pimbuild --version`` print, the options a user can pick in
every config group (``choices``: the YAML files of the group, the package's and those of a
``--config-dir``; never the ``<group>_schema`` entries the schemas are registered under), and
the device files of a ``--config-dir`` that join the GPU catalogue (``user_devices``)."""

from __future__ import annotations

import textwrap
from dataclasses import fields
from importlib import metadata
from pathlib import Path

import pimbuild.conf
from pimbuild import __version__
from pimbuild.build.config import Config
from pimbuild.build.graph import stage_names
from pimbuild.core.errors import PimbuildError

CONF = Path(pimbuild.conf.__file__).parent  # the package's config tree (pimbuild/conf/ in the repo)

# Every config group: how it is chosen on the command line, and what it sets. A group with
# no line here fails tests/test_usage.py.
GROUPS: dict[str, tuple[str, str]] = {
    "model": ("model=", "the PyTorch model and its input shapes"),
    "system": ("system=", "the target: pim (host CPU + PIM cores) or gpus (heterogeneous GPUs)"),
    "lowering": ("lowering=", "torch-mlir lowering: fusion, fast-math, weights"),
    "platform": ("platform=", "pim: the host CPU (caches, counter events)"),
    "profile": ("profile=", "pim: how nest times and counts are taken (profile.backend, "
                            "repetitions)"),
    "pim": ("pim=", "pim: the PIM system (pim.cores, pim.freq_ghz, bandwidths)"),
    "policy": ("policy=", "pim: the placement rule"),
    "sim": ("sim=", "pim: what the estimate charges for copies and switches"),
    "device": ("devices=[a,b]", "gpus: the GPUs, from the catalogue (and a --config-dir's "
                                "device/*.yaml)"),
    "link": ("link=", "gpus: what joins the devices (link@tp_link= joins tensor-parallel twins)"),
    "gpus": ("gpus=", "gpus: the planner (gpus.planner), kernel times (gpus.backend), "
                      "precision, MILP limits"),
    "serve": ("serve=", "gpus: serving requests (arrivals, rate, output_len, the monitor)"),
    "experiment": ("+experiment=", "a paper experiment: builds each of its points"),
}
# The top-level keys of the root schema, with what each sets.
KEYS: dict[str, str] = {
    "devices": "gpus: the GPUs, first the pair's left one (default [a100,l40s])",
    "stages": "build these stages and what they depend on (default [simulate]: everything)",
    "store": "the content-addressed artifact store (default outputs/artifacts)",
    "show_candidates": "print the table of candidate units at the end (default true)",
    "verify": "hash every stored file before it is reused (default false)",
    "timeline": "simulate also writes timeline.json, for Perfetto (default false)",
    "objective": "what a build returns to a searching sweeper: headline or a column",
}
# The distributions ``--version`` names: pimbuild's and its key dependencies'.
WIDTH = 94  # the help page's lines
DEPENDENCIES = ("torch", "torch-mlir", "hydra-core", "omegaconf", "highspy")

INTRO = """\
pimbuild {version}: where should each part of a PyTorch model run?

It lowers a model at fixed input shapes through torch-mlir and MLIR, splits it into units,
costs each unit where it could run, decides a placement, emits the partitioned program, checks
it against PyTorch eager and estimates what the placement buys. Every artifact stays on disk,
content-addressed, under store= (re-run any stage from it).

Targets (system=):
  pim   host CPU + processing-in-memory cores (Torch-PIM): every parallel loop nest is a
        candidate, placed by the paper's two-stage rule from host profiles (or policy=...)
  gpus  kernel-level placement over heterogeneous GPUs (FluidGPU): throughput or latency MILP
        planners, pipelined serving, an online monitor

Common commands:
  pimbuild model=llama7b pim.cores=128                         # the PIM target
  pimbuild system=gpus model=llama3_8b devices=[a100,l40s]     # a GPU pair
  pimbuild system=gpus model=llama3_8b gpus.planner=latency link=rdma25
  pimbuild -m model=relu,softmax pim.cores=64,128              # a sweep, one summary table
  pimbuild --config-dir my_conf model=mymodel                  # your own model/device files
  pimbuild model=relu stages=[lower,extract]                   # some stages only
  pimbuild +experiment=agreement                               # a paper experiment
"""

OUTRO = """\
Flags:
  --help, -h        this page            --version     pimbuild's and its dependencies'
  -m, --multirun    sweep every combination of comma-separated values
  --config-dir DIR  your own config files (DIR/model/<name>.yaml, DIR/device/<name>.yaml, ...)
  --cfg job         print the composed config and stop    --hydra-help  Hydra's own flags

Any value of any group can be set as group.key=value (pim.cores=64, serve.rate=4); the keys,
their defaults and ranges: docs/config.md. More: README.md, docs/pim.md, docs/gpus.md.
"""


def group_dirs(config_dir: Path | None = None) -> list[Path]:
    """The config trees searched: the package's, then a user's ``--config-dir``."""
    return [CONF, *([Path(config_dir)] if config_dir is not None else [])]


def choices(group: str, config_dir: Path | None = None) -> list[str]:
    """The options of ``group`` a user can pick: its YAML files, sorted."""
    names = {p.stem for d in group_dirs(config_dir) for p in (d / group).glob("*.yaml")}
    return sorted(n for n in names if not n.endswith("_schema"))


def user_devices(config_dir: Path | None) -> list[str]:
    """The devices a ``--config-dir`` adds to the catalogue (``device/<name>.yaml`` not
    shipped with the package)."""
    if config_dir is None:
        return []
    return sorted(set(choices("device", config_dir)) - set(choices("device")))


def config_dir(args: list[str]) -> Path | None:
    """The ``--config-dir`` (``-cd``) of a command line, or None."""
    for i, arg in enumerate(args):
        if arg in ("--config-dir", "-cd") and i + 1 < len(args):
            return Path(args[i + 1])
        if arg.startswith("--config-dir="):
            return Path(arg.partition("=")[2])
    return None


def help_text(config_dir: Path | None = None) -> str:
    """The help page: the groups' options include those of ``config_dir``."""
    indent = " " * 19
    lines = [INTRO.format(version=__version__), "Config groups (pick one option each):"]
    for group, (how, what) in GROUPS.items():
        lines.append(f"  {how:<16} {what}")
        lines += textwrap.wrap(", ".join(choices(group, config_dir)), WIDTH,
                               initial_indent=indent, subsequent_indent=indent)
    lines += ["", "Top-level keys:"]
    for key, what in KEYS.items():
        lines.append(f"  {key + '=':<16} {what}")
        if key == "stages":
            for t in choices("system", config_dir):
                lines += textwrap.wrap(f"system={t}: {', '.join(stages(t))}", WIDTH,
                                       initial_indent=indent, subsequent_indent=indent + "  ")
    return "\n".join(lines) + "\n\n" + OUTRO


def versions() -> str:
    """``pimbuild --version``: pimbuild's version, then its key dependencies' (and where the
    MLIR Python bindings come from)."""
    lines = [f"pimbuild {__version__}"]
    for dist in DEPENDENCIES:
        try:
            lines.append(f"  {dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            lines.append(f"  {dist} not installed")
    lines.append("  MLIR Python bindings: torch_mlir.ir, bundled with torch-mlir")
    return "\n".join(lines) + "\n"


def stages(target: str) -> list[str]:
    """The stages of a shipped target, in build order ("?" for one not importable here: a
    user's target whose package is not on the path until the build)."""
    try:
        return stage_names(target)
    except PimbuildError:
        return ["?"]


def top_level_keys() -> list[str]:
    """The root schema's own keys (the groups aside)."""
    return [f.name for f in fields(Config)
            if f.name not in GROUPS and f.name not in ("experiment", "tp_link")]
