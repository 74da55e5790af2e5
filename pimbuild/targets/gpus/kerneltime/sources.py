"""The measured operator times the kernel-time model is fitted to and judged on.

Three public sources, each read from a checkout or a bare git clone of its repository and
reduced to one compact file (``pimbuild/targets/gpus/kerneltime/data/measured_ops.csv.gz``) by
``pimbuild-kernels data``:

- **NeuSight** (github ``sitar-lab/NeuSight``, MIT licence): its measured test sets
  ``scripts/asplos/data/dataset/test/{linear,bmm,elem,softmax,ln}.csv``: fp32 (TF32 off) on
  P4, P100, T4, V100, two A100s, L4 and H100; ``Latency`` in ms is the mean of the fastest
  samples of one eager call between two CUDA events, so it includes the host's dispatch;
- **Vidur** (github ``microsoft/vidur``, MIT licence): ``data/profiling/compute/{a100,a40,
  h100}/<model>/mlp.csv``, fp16 LLM operators (projections, RoPE, RMSNorm, SwiGLU, add) per
  token count and tensor-parallel degree, kernel times in ms (median kept) at 1 us resolution;
- **ours**: ``docs/measurements/kernels_h200/ops_*.csv`` from ``bench/measure_ops.py`` on an
  H200 (fp32, bf16, fp16; kernel time, dispatch excluded).

Each row: ``source, device, group, op, dtype, b, m, n, k, h, time_us``. ``group`` names the
Vidur layer a row belongs to (``model|tokens|tp``), so a layer's kernels can be summed.
"""

from __future__ import annotations

import csv
import gzip
import io
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pimbuild.errors import ConfigError
from pimbuild.targets.gpus.kerneltime import ops

DATA = Path(__file__).parent / "data"
MEASURED = DATA / "measured_ops.csv.gz"
DEVICES = DATA / "devices.csv"
FIELDS = ("source", "device", "group", "op", "dtype", "b", "m", "n", "k", "h", "time_us")
NEUSIGHT_DEVICES = {"Tesla P4": "P4", "Tesla P100-PCIE-16GB": "P100-PCIe-16GB",
                    "Tesla T4": "T4", "Tesla V100-PCIE-32GB": "V100-PCIe-32GB",
                    "NVIDIA A100-PCIE-40GB": "A100-PCIe-40GB",
                    "NVIDIA A100 80GB PCIe": "A100-PCIe-80GB", "NVIDIA L4": "L4",
                    "NVIDIA H100 80GB HBM3": "H100-SXM"}
VIDUR_DEVICES = {"a100": "A100-SXM-80GB", "a40": "A40", "h100": "H100-SXM"}
NEUSIGHT_TEST = "scripts/asplos/data/dataset/test"
VIDUR_COMPUTE = "data/profiling/compute"
# Vidur's token counts kept for models other than Llama-2-7B (which keeps all): a
# geometric spread, so the file stays small.
VIDUR_TOKENS = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768,
                1024, 1536, 2048, 3072, 4096}


class Repo:
    """A repository's files at HEAD, from a work tree or a bare clone (``git show``)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise ConfigError(f"{root} is not a folder (a checkout or a git clone)")
        self.bare = not (self.root / ".git").exists() and (self.root / "HEAD").is_file()

    def list(self, folder: str) -> list[str]:
        if not self.bare:
            base = self.root / folder
            return sorted(str(p.relative_to(self.root)) for p in base.rglob("*") if p.is_file())
        out = subprocess.run(["git", "-C", str(self.root), "ls-tree", "-r", "--name-only",
                              "HEAD", folder], capture_output=True, text=True, check=False)
        return out.stdout.split()

    def read(self, path: str) -> str | None:
        """The file's text; None where it is absent (a large-file pointer not fetched)."""
        if not self.bare:
            p = self.root / path
            return p.read_text() if p.is_file() else None
        out = subprocess.run(["git", "-C", str(self.root), "show", f"HEAD:{path}"],
                             capture_output=True, text=True, check=False)
        return out.stdout if out.returncode == 0 else None


def _row(source: str, device: str, group: str, o: ops.Op, time_us: float) -> dict[str, Any]:
    dims = {"b": o.b, "m": o.m, "n": o.n, "k": o.k} if o.op in ops.GEMMS \
        else {"b": o.b, "h": o.h}
    return {"source": source, "device": device, "group": group, "op": o.op,
            "dtype": o.dtype, **dims, "time_us": round(time_us, 4)}


def neusight(root: Path) -> Iterator[dict[str, Any]]:
    """NeuSight's measured test sets (fp32)."""
    repo = Repo(root)
    names = {"linear": None, "bmm": None, "elem": None, "softmax": "softmax", "ln": "layernorm"}
    found = False
    for stem, op in names.items():
        text = repo.read(f"{NEUSIGHT_TEST}/{stem}.csv")
        if text is None:
            continue
        found = True
        for r in csv.DictReader(io.StringIO(text)):
            device = NEUSIGHT_DEVICES.get(r["Device"].strip())
            if device is None:
                continue
            name = op or r["OPName"]
            if name in ops.GEMMS:
                dims = {k: r[k.upper()] for k in "bmnk"}
            else:
                dims = {"b": r["B"], "h": r["H"]}
            o = ops.parse({"op": name, "dtype": "fp32", **dims}, f"{stem}.csv")
            yield _row("neusight", device, "", o, float(r["Latency"]) * 1e3)
    if not found:
        raise ConfigError(f"{root} has no {NEUSIGHT_TEST}/*.csv: is it NeuSight's repository?")


def _vidur_ops(r: dict[str, str]) -> Iterator[tuple[str, ops.Op]]:
    """(column, Op) of one mlp.csv row (a layer at a token count and TP degree)."""
    t, tp = int(r["num_tokens"]), int(r["num_tensor_parallel_workers"])
    heads, kv, d = int(r["n_head"]), int(r["n_kv_head"]), int(r["n_embd"])
    ffn, gated = int(r["n_expanded_embd"]), r["use_gated_mlp"] == "True"
    head_dim = d // heads

    def lin(n: int, k: int) -> ops.Op:
        return ops.Op("linear", "fp16", b=1, m=t, n=n, k=k)

    def vec(name: str, h: int) -> ops.Op:
        return ops.Op(name, "fp16", b=t, h=h)

    yield "input_layernorm", vec("rmsnorm", d)
    yield "attn_pre_proj", lin(d, (heads + 2 * kv) * head_dim // tp)
    yield "attn_rope", vec("rope", (heads + kv) * head_dim // tp)
    yield "attn_post_proj", lin(d // tp, d)
    yield "post_attention_layernorm", vec("rmsnorm", d)
    yield "mlp_up_proj", lin(d, (2 if gated else 1) * ffn // tp)
    yield "mlp_act", vec("silu_mul" if gated else "gelu", ffn // tp)
    yield "mlp_down_proj", lin(ffn // tp, d)
    yield "add", vec("add", d)


def vidur(root: Path) -> Iterator[dict[str, Any]]:
    """Vidur's profiled LLM operators (fp16), gated-MLP models only (LLaMA-style layers)."""
    repo = Repo(root)
    files = [p for p in repo.list(VIDUR_COMPUTE) if p.endswith("/mlp.csv")]
    if not files:
        raise ConfigError(f"{root} has no {VIDUR_COMPUTE}/*/mlp.csv: is it Vidur's "
                          f"repository?")
    for path in files:
        parts = path.split("/")
        device = VIDUR_DEVICES.get(parts[3])
        model = "/".join(parts[4:-1])
        text = repo.read(path)
        if device is None or text is None:
            continue
        keep_all = model.endswith("Llama-2-7b-hf")
        for r in csv.DictReader(io.StringIO(text)):
            if r["use_gated_mlp"] != "True" or \
                    (not keep_all and int(r["num_tokens"]) not in VIDUR_TOKENS):
                continue
            group = f"{model}|{r['num_tokens']}|{r['num_tensor_parallel_workers']}"
            for column, o in _vidur_ops(r):
                yield _row("vidur", device, group, o,
                           float(r[f"time_stats.{column}.median"]) * 1e3)


def measured(folder: Path, device: str = "H200-SXM",
             source: str = "ours") -> Iterator[dict[str, Any]]:
    """Every ``ops_*.csv`` under ``folder`` (``bench/measure_ops.py``'s output)."""
    files = sorted(Path(folder).glob("ops_*.csv"))
    if not files:
        raise ConfigError(f"{folder} has no ops_*.csv (bench/measure_ops.py writes them)")
    for path in files:
        found, rows = ops.read(path)
        for o, r in zip(found, rows, strict=True):
            yield _row(source, device, "", o, float(r["time_us"]))


def write(rows: list[dict[str, Any]], path: Path) -> None:
    """The rows as a gzip CSV (written whole, then renamed into place)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wt", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    tmp.replace(path)


def load(path: Path = MEASURED) -> list[dict[str, Any]]:
    """The measured rows, each with its ``Op`` under ``"o"``; a ConfigError if unreadable."""
    try:
        with gzip.open(path, "rt", newline="") as f:
            rows = list(csv.DictReader(f))
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read measured ops {path}: {e}") from None
    for i, r in enumerate(rows):
        r["o"] = ops.parse(r, f"{path}:{i + 2}")
        r["time_us"] = float(r["time_us"])
    return rows


def devices(path: Path = DEVICES) -> dict[str, ops.Gpu]:
    """The specs of the measured GPUs, by name."""
    with Path(path).open(newline="") as f:
        return {r["name"]: ops.gpu_of(r) for r in csv.DictReader(f)}
