"""``model=hf`` on architectures of each kind (not a test): every architecture built through
every stage of both targets, or the one line that refuses it. Prints a table and writes it to
``--out`` (markdown).

    .venv/bin/python bench/hf_archs.py [--only LlamaForCausalLM,BertModel] [--pim-only]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ARCHS = {  # kind -> architectures
    "decoder": ["LlamaForCausalLM", "GPT2LMHeadModel", "Qwen2ForCausalLM", "MistralForCausalLM",
                "PhiForCausalLM", "GPTNeoXForCausalLM"],
    "encoder": ["BertModel", "RobertaForMaskedLM", "DistilBertModel"],
    "encoder-decoder": ["T5ForConditionalGeneration", "BartForConditionalGeneration"],
    "vision": ["ViTForImageClassification", "ResNetForImageClassification",
               "ConvNextForImageClassification"],
    "audio": ["WhisperForConditionalGeneration", "Wav2Vec2Model"],
    # beyond the kinds: data-dependent routing, two inputs, state-space scans, windows
    "other": ["MixtralForCausalLM", "CLIPModel", "MambaForCausalLM",
              "SwinForImageClassification"],
}
TARGETS = {"pim": ["profile.backend=timer"], "gpus": ["system=gpus", "devices=[a100,l40s]"]}
KEEP = re.compile(r"^(error:|speedup |agreement |[0-9.]+ tokens|partitioned program)")


def one(arch: str, target: str, store: Path, runs: Path) -> dict:
    cmd = [sys.executable, "-m", "pimbuild.commands.cli", "model=hf", f"model.hf.arch={arch}",
           *TARGETS[target], f"store={store}", f"hydra.run.dir={runs / target / arch}",
           "show_candidates=false", "platform.calibration_max_spread=0.5"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=1800)
    lines = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines()
             if KEEP.match(ln.strip())]
    ok = proc.returncode == 0
    check = next((ln for ln in lines if "matches eager" in ln or "partitioned" in ln), "")
    return {"arch": arch, "target": target, "ok": ok, "s": time.perf_counter() - start,
            "line": (check if ok else next((ln for ln in lines if ln.startswith("error:")),
                                            (proc.stderr or proc.stdout).strip()[-200:]))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated architectures")
    ap.add_argument("--pim-only", action="store_true")
    ap.add_argument("--out", type=Path, default=REPO / "outputs" / "bench" / "hf_archs.md")
    args = ap.parse_args()
    wanted = set(args.only.split(",")) if args.only else None
    root = Path(tempfile.mkdtemp(prefix="pimbuild-hf-"))
    rows = []
    for kind, archs in ARCHS.items():
        for arch in archs:
            if wanted and arch not in wanted:
                continue
            for target in ["pim"] if args.pim_only else list(TARGETS):
                r = one(arch, target, root / "store", root / "runs") | {"kind": kind}
                print(f"{kind:16} {arch:34} {target:4} {'ok' if r['ok'] else 'REFUSED':8} "
                      f"{r['s']:6.0f} s  {r['line'][:150]}", flush=True)
                rows.append(r)
    md = ["| kind | architecture | target | builds and matches eager | s | line |",
          "|---|---|---|---|---:|---|"]
    md += [f"| {r['kind']} | {r['arch']} | {r['target']} | {'yes' if r['ok'] else 'no'} | "
           f"{r['s']:.0f} | {r['line'].replace('|', '/')} |" for r in rows]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(md) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
