"""FluidGPU's Fig. 2 on every pair of the device catalogue (not a test): the share of a
workload's kernels that run faster on the cheaper GPU of a pair than on the dearer one, by
count and by the dearer GPU's time, from the spec roofline, from the fitted kernel-time
model and from the default (``auto``: measured where the shipped data hold the kernel), over
the engine kernels, beside the paper's measured 67% / 36% (all kernels, A100 vs L40S), 57%
(decode) and 45% (prefill).

    .venv/bin/python bench/fig2_pairs.py [--out outputs/bench]

Both profiles are built for all catalogue devices at once (``kernel_times.csv`` has a column
per device), for LLaMA-3-8B's decode step (batch 16, KV 1020) and its prefill (1020 tokens),
in bf16. Writes ``fig2_pairs.{md,json}``.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import quiet_build, write_json  # noqa: E402

DEVICES = ["a100", "l40s", "h100", "h200", "rtxpro6000", "b200", "l4"]
PRICE = {"a100": 3.67, "l40s": 1.86, "h100": 6.98, "h200": 8.0, "rtxpro6000": 3.03,
         "b200": 10.0, "l4": 0.71}  # pimbuild/conf/device/*.yaml, the dearer GPU is "first"
MODELS = {"llama3_8b": "decode", "llama3_8b_prefill": "prefill"}
BACKENDS = ("roofline", "fitted", "auto")
PAPER = "all 67% / 36% (count / time), decode 57%, prefill 45% (A100 vs L40S, measured)"


def times(model: str, backend: str, store: Path) -> list[dict[str, float]]:
    over = ["system=gpus", f"model={model}", f"devices=[{','.join(DEVICES)}]",
            f"gpus.backend={backend}", "stages=[profile]", f"store={store}"]
    result, _ = quiet_build(over, store.parent / "runs" / "fig2")
    folder = Path(result.manifest["stages"]["profile"]["dir"])
    with (folder / "kernel_times.csv").open() as f:
        return [{d: float(r[f"t_{d}_s"]) for d in DEVICES} for r in csv.DictReader(f)]


def shares(rows: list[dict[str, float]], first: str, second: str) -> tuple[float, float]:
    faster = [r for r in rows if r[second] < r[first]]
    return len(faster) / len(rows), sum(r[first] for r in faster) / sum(r[first] for r in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=Path("outputs/artifacts"))
    ap.add_argument("--out", type=Path, default=Path("outputs/bench"))
    args = ap.parse_args()
    t = {(m, b): times(m, b, args.store) for m in MODELS for b in BACKENDS}
    pairs = [tuple(sorted(p, key=lambda d: -PRICE[d])) for p in
             itertools.combinations(DEVICES, 2)]
    out = []
    lines = [f"Paper: {PAPER}.", "",
             "| dearer | cheaper | decode: roofline / fitted / auto (count; time) | prefill: "
             "roofline / fitted / auto | all: roofline / fitted / auto |", "|---|---|---|---|---|"]
    for first, second in pairs:
        row = {"first": first, "second": second}
        cells = []
        for phase in (*MODELS.values(), "all"):
            got = {}
            for b in BACKENDS:
                rows = [r for m, ph in MODELS.items() if phase in (ph, "all")
                        for r in t[(m, b)]]
                got[b] = shares(rows, first, second)
            row[phase] = got
            cells.append(" / ".join(f"{got[b][0]:.0%}" for b in BACKENDS) + "; "
                         + " / ".join(f"{got[b][1]:.0%}" for b in BACKENDS))
        out.append(row)
        lines.append(f"| {first} | {second} | " + " | ".join(cells) + " |")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fig2_pairs.md").write_text("\n".join(lines) + "\n")
    write_json(args.out / "fig2_pairs.json", out)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
