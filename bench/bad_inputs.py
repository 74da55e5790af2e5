"""The bad inputs issue 54 listed, each run as a user would and answered (not a test: the
fuzzer in tests/test_inputs.py is). Prints each command and what it printed last, with its
exit status, as a Markdown table.

    .venv/bin/python bench/bad_inputs.py [--only WORD]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BIN = Path(sys.executable).parent
TABLE = {"format": "pimbuild-kernel-table/1", "device": "A100-80GB-SXM", "gpu": "",
         "driver": "", "torch": "", "cuda": "", "precision": "bf16", "method": "",
         "kernels": {"k": 1e-5}}
GPUS = ["system=gpus", "model=mlp", "devices=[a100,l40s]"]
OPS = "op,dtype,b,m,n,k,h,g\nlinear,bf16,1,64,4096,4096,,\n"


def cases(d: Path) -> list[tuple[str, list[str], dict[str, str]]]:
    """(what, command, files to write first) for every case."""
    conf = Path(__file__).parent.parent / "pimbuild" / "conf"
    device = (conf / "device" / "l40s.yaml").read_text()

    def table(**kw: object) -> str:
        return json.dumps({**TABLE, **kw}, allow_nan=True)

    def predict(yaml_text: str, ops_text: str = OPS) -> tuple[list[str], dict[str, str]]:
        return (["pimbuild-kernels", "predict", "ops.csv", "--device", "mine", "--config-dir",
                 ".", "--out", "out.csv"], {"device/mine.yaml": yaml_text, "ops.csv": ops_text})

    table_build = [*GPUS, "gpus.backend=table", "gpus.tables=[t.json]"]
    out = [
        ("a table time of true", ["pimbuild", *table_build],
         {"t.json": table(kernels={"k": True})}),
        ("a table time of Infinity", ["pimbuild", *table_build],
         {"t.json": table(kernels={"k": float("inf")})}),
        ("a table time of 1e30", ["pimbuild", *table_build],
         {"t.json": table(kernels={"k": 1e30})}),
        ("a table without device", ["pimbuild", *table_build],
         {"t.json": json.dumps({k: v for k, v in TABLE.items() if k != "device"})}),
        ("merge: a table without device",
         ["pimbuild-kernels", "merge", "t.json", "t.json", "--out", "m.json"],
         {"t.json": json.dumps({k: v for k, v in TABLE.items() if k != "device"})}),
        ("a table of a device devices= does not name", ["pimbuild", *table_build],
         {"t.json": table(device="B200")}),
    ]
    for what, text in (
            ("predict: a device field missing", device.replace("sms: 142\n", "")),
            ("predict: a device field misspelt", device.replace("sms: 142", "smz: 142")),
            ("predict: sms fast", device.replace("sms: 142", "sms: fast")),
            ("predict: sms -1008", device.replace("sms: 142", "sms: -1008")),
            ("predict: sms .inf", device.replace("sms: 142", "sms: .inf")),
            ("predict: sms 0", device.replace("sms: 142", "sms: 0")),
            ("predict: tdp_w .nan", device.replace("tdp_w: 350", "tdp_w: .nan")),
            ("predict: a device file without name", device.replace("name: L40S\n", ""))):
        out.append((what, *predict(text)))
    for what, text in (("predict: an ops CSV with inf", OPS.replace("64,", "inf,", 1)),
                       ("predict: an empty ops CSV", ""),
                       ("predict: a header-only ops CSV", OPS.splitlines()[0] + "\n"),
                       ("predict: an ops CSV with an extra field",
                        OPS.replace("h,g\n", "h,g,note\n").replace(",,\n", ",,x\n"))):
        out.append((what, *predict(device, text)))
    model = (conf / "model" / "relu.yaml").read_text()
    out += [
        ("a malformed device YAML under devices=",
         ["pimbuild", "--config-dir", ".", "system=gpus", "model=mlp", "devices=[a100,bad]"],
         {"device/bad.yaml": "name: X\nfp32_tflops: [1\n"}),
        ("a model file without name", ["pimbuild", "--config-dir", ".", "model=noname"],
         {"model/noname.yaml": model.replace("name: relu\n", "")}),
        ("modle=relu", ["pimbuild", "modle=relu"], {}),
        ("+modle=relu", ["pimbuild", "+modle=relu"], {}),
        ("+pim.core=128", ["pimbuild", "+pim.core=128"], {}),
        ("pimbuild: device.l40s.sms=0", ["pimbuild", *GPUS, "device.l40s.sms=0"], {}),
        ("gpus.tables without gpus.backend=table",
         ["pimbuild", *GPUS, "gpus.tables=[t.json]"], {"t.json": table()}),
    ]
    return out


def run(what: str, command: list[str], files: dict[str, str], root: Path) -> dict:
    d = root / str(abs(hash(what)))
    d.mkdir()
    for name, text in files.items():
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(text)
    exe = [str(BIN / command[0]), *command[1:]]
    p = subprocess.run(exe, cwd=d, capture_output=True, text=True, timeout=600)
    lines = (p.stdout + p.stderr).strip().splitlines()
    store = d / "outputs" / "artifacts"
    stages = sorted(x.name for x in store.iterdir() if x.is_dir() and not
                    x.name.startswith(".")) if store.exists() else []
    return {"what": what, "command": " ".join(command), "status": p.returncode,
            "last": lines[-1] if lines else "", "lines": len(lines), "published": stages}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp())
    try:
        print("| case | command | exit | output (last line) | stages published |")
        print("|---|---|---:|---|---|")
        for what, command, files in cases(root):
            if args.only in what:
                r = run(what, command, files, root)
                print(f"| {r['what']} | `{r['command']}` | {r['status']} | "
                      f"{r['last'].replace('|', '/')} | {', '.join(r['published']) or '-'} |",
                      flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
