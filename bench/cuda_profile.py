"""The ``cuda`` kernel-time backend on a real GPU, against the roofline it replaces (not a test).

    # where torch-mlir runs (lower + extract, and the roofline profile, into one store):
    .venv/bin/python bench/cuda_profile.py --prepare --store outputs/bench/cuda_store
    # on the GPU machine (torch, no torch-mlir needed: the store's lower/extract are reused):
    python3 bench/cuda_profile.py --store outputs/bench/cuda_store --out DIR

On the GPU it (1) times spec-sheet probes (a bf16 GEMM, a copy, an fp32 elementwise add, a
launch) against the roofline's assumed efficiencies
(``pimbuild/conf/gpus/default.yaml``), and (2) for
each model builds ``profile`` with ``gpus.backend=cuda`` and compares every kernel's measured
time on the GPU's device with its roofline time: the measured/roofline ratio per kernel
(median and quartiles, by engine) and for the whole layer, and the layer's eager forward (no
interpreter, one CUDA-event pair) against the sum of its timed nodes. Writes
``cuda_profile.{json,md}`` and each model's ``kernel_times.csv`` to ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import quiet_build  # noqa: E402

MODELS = ["llama3_8b", "llama3_8b_prefill", "gptj6b", "llama7b", "mamba", "mmdit"]


def overrides(model: str, devices: str, store: Path, backend: str,
              target: str = "profile", precision: str = "bf16") -> list[str]:
    return ["system=gpus", f"model={model}", f"devices=[{devices}]", f"store={store}",
            f"stages=[{target}]", f"gpus.backend={backend}", f"gpus.precision={precision}"]


def prepare(args: argparse.Namespace) -> None:
    for model in args.models:
        for precision in args.precisions:
            result, seconds = quiet_build(overrides(model, args.devices, args.store, "roofline",
                                                    "decide", precision),
                                          args.store / "runs" / model)
            print(f"{model} ({precision}): lower + extract + roofline profile + decide, "
                  f"{seconds:.1f} s (built {result.executed})")


def events(fn, repetitions: int = 20, warmup: int = 3) -> float:
    """Minimum seconds of ``fn()`` between two CUDA events."""
    import torch

    best = float("inf")
    for i in range(warmup + repetitions):
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        start.record()
        fn()
        end.record()
        end.synchronize()
        if i >= warmup:
            best = min(best, start.elapsed_time(end) / 1e3)
    return best


def probes(spec: dict) -> list[dict]:
    """Spec-sheet probes on this GPU, each with the fraction of the spec it reached."""
    import torch

    rows = []
    for m, k, n in ((8192, 8192, 8192), (4096, 4096, 4096), (1020, 4096, 14336),
                    (16, 4096, 14336)):
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        t = events(lambda a=a, b=b: a @ b)
        flops, moved = 2 * m * k * n, 2 * (m * k + k * n + m * n)
        rows.append({"probe": f"bf16 GEMM {m}x{k}x{n}", "seconds": t,
                     "tflops": flops / t / 1e12, "gbps": moved / t / 1e9,
                     "of_bf16_peak": flops / t / 1e12 / spec["bf16_tflops"],
                     "of_mem_bw": moved / t / 1e9 / spec["mem_gbps"]})
    a = torch.randn(8192, 8192, device="cuda")  # fp32 on CUDA cores (TF32 off: the default)
    t = events(lambda: a @ a)
    rows.append({"probe": "fp32 GEMM 8192x8192x8192 (no TF32)", "seconds": t,
                 "tflops": 2 * 8192**3 / t / 1e12,
                 "of_fp32_peak": 2 * 8192**3 / t / 1e12 / spec["fp32_tflops"]})
    x = torch.empty(1 << 30, device="cuda", dtype=torch.uint8)
    y = torch.empty_like(x)
    t = events(lambda: y.copy_(x))
    rows.append({"probe": "copy 1 GiB", "seconds": t, "gbps": 2 * x.numel() / t / 1e9,
                 "of_mem_bw": 2 * x.numel() / t / 1e9 / spec["mem_gbps"]})
    u = torch.randn(1 << 27, device="cuda")
    v = torch.randn(1 << 27, device="cuda")
    t = events(lambda: torch.add(u, v))
    rows.append({"probe": "fp32 add 2^27", "seconds": t, "gbps": 12 * u.numel() / t / 1e9,
                 "of_mem_bw": 12 * u.numel() / t / 1e9 / spec["mem_gbps"]})
    one = torch.ones(1, device="cuda")
    t = events(lambda: [one.add_(1) for _ in range(1000)]) / 1000
    rows.append({"probe": "launch (1-element add, stream, per kernel)", "seconds": t})
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(1000):
            one.add_(1)
    t = events(graph.replay) / 1000
    rows.append({"probe": "launch (1-element add, CUDA graph replay, per kernel)", "seconds": t})
    return rows


def quartiles(values: list[float]) -> list[float]:
    if len(values) < 2:
        return values * 3
    q = statistics.quantiles(values, n=4)
    return [q[0], statistics.median(values), q[2]]


def compare(model: str, args: argparse.Namespace, device: str, precision: str) -> dict:
    """Build ``profile`` with the cuda backend and set it beside the roofline's; time the
    nodes twice more for the run-to-run spread."""
    import torch

    from pimbuild import frontend
    from pimbuild.targets.gpus.program import cuda

    result, seconds = quiet_build(overrides(model, args.devices, args.store, "cuda",
                                            precision=precision), args.store / "runs" / model)
    folder = Path(result.manifest["stages"]["profile"]["dir"])
    info = json.loads((folder / "profile.json").read_text())
    with (folder / "kernel_times.csv").open() as f:
        rows = list(csv.DictReader(f))
    shutil.copy(folder / "kernel_times.csv",
                args.out / f"{model}_{precision}_kernel_times.csv")
    roof, _ = quiet_build(overrides(model, args.devices, args.store, "roofline",
                                    precision=precision), args.store / "runs" / model)
    with (Path(roof.manifest["stages"]["profile"]["dir"]) / "kernel_times.csv").open() as f:
        estimate = {r["id"]: float(r[f"t_{device}_s"]) for r in csv.DictReader(f)}
    ratio: dict[str, list[float]] = {}
    for r in rows:
        ratio.setdefault(r["engine"], []).append(float(r[f"t_{device}_s"]) / estimate[r["id"]])
    measured_total = sum(float(r[f"t_{device}_s"]) for r in rows)
    roofline_total = sum(estimate.values())
    # The whole layer in eager mode at the measured precision: one event pair, no interpreter.
    recipe = frontend.build_recipe(args.model_params(model))
    gm = recipe.module.to("cuda")
    gm, inputs, _ = cuda.served(gm, [t.to("cuda") for t in recipe.inputs.values()],
                                info.get("measured_precision") or "fp32")
    with torch.no_grad():
        forward = events(lambda: gm(*inputs))
    plans = {}
    for backend in ("roofline", "cuda"):  # the throughput planner on each profile
        built, _ = quiet_build(overrides(model, args.devices, args.store, backend, "decide",
                                         precision), args.store / "runs" / model)
        plan = json.loads((Path(built.manifest["stages"]["decide"]["dir"])
                           / "placement.json").read_text())
        plans[backend] = {"objective_s": plan["objective_s"],
                          "on_measured": sum(k["device"] == device for k in plan["kernels"])}
    # Run-to-run spread: two more timings of every node; |ratio - 1| over nodes above 5 us.
    first, _ = cuda.node_times(args.model_params(model), "cuda", precision=precision)
    second, _ = cuda.node_times(args.model_params(model), "cuda", precision=precision)
    moved = [abs(second[n] / first[n] - 1) for n in first if min(first[n], second[n]) > 5e-6]
    top = sorted(rows, key=lambda r: -float(r[f"t_{device}_s"]))[:5]
    return {
        "model": model, "precision": precision, "build_s": seconds,
        "spread": {"nodes_above_5us": len(moved),
                   "median": statistics.median(moved) if moved else None,
                   "max": max(moved) if moved else None}, "executed": result.executed,
        "plans": plans,
        **{k: info.get(k) for k in ("gpu", "measured", "measured_precision", "event_floor_s",
                                    "nodes_timed",
                                    "kernels_with_timed_node", "seconds_timed",
                                    "seconds_of_nodes_without_kernels")},
        "kernels": len(rows), "measured_s": measured_total, "roofline_s": roofline_total,
        "eager_forward_s": forward,
        "ratio_quartiles": {e: quartiles(v) for e, v in ratio.items()},
        "kernels_by_engine": {e: len(v) for e, v in ratio.items()},
        "top": [{"name": r["name"], "kind": r["kind"], "engine": r["engine"],
                 "measured_s": float(r[f"t_{device}_s"]), "roofline_s": estimate[r["id"]]}
                for r in top],
    }


def markdown(gpu: dict, probe_rows: list[dict], models: list[dict]) -> str:
    floor = {m["event_floor_s"] for m in models if m.get("event_floor_s") is not None}
    lines = [f"# cuda backend on {gpu['name']} (torch {gpu['torch']}, {gpu['sms']} SMs, "
             f"L2 {gpu['l2_mb']:.0f} MB)", "",
             "Event floor subtracted per node: "
             + ", ".join(f"{f * 1e6:.2f} us" for f in sorted(floor)), "",
             "## Spec-sheet probes", "",
             "| probe | time | TFLOP/s | GB/s | of bf16 peak | of fp32 peak | of memory bw |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in probe_rows:
        cell = [f"{r['seconds'] * 1e6:.1f} us", f"{r.get('tflops', 0):.0f}",
                f"{r.get('gbps', 0):.0f}", f"{r.get('of_bf16_peak', 0):.2f}",
                f"{r.get('of_fp32_peak', 0):.2f}",
                f"{r.get('of_mem_bw', 0):.2f}"]
        lines.append(f"| {r['probe']} | " + " | ".join(cell) + " |")
    lines += ["", "## Kernels: measured / roofline on the GPU's device", "",
              "| model | served / measured precision | kernels (timed node) | layer measured | "
              "layer roofline | "
              "measured / roofline | eager forward | ratio quartiles by engine | "
              "planner: cycle, kernels on the GPU (roofline / measured) | "
              "run-to-run spread (median, max) |",
              "|---|---|---:|---:|---:|---:|---:|---|---|---|"]
    for m in models:
        q = "; ".join(f"{e} ({m['kernels_by_engine'][e]}): "
                      + " / ".join(f"{x:.2f}" for x in v)
                      for e, v in m["ratio_quartiles"].items())
        sp = m["spread"]
        spread = "n/a" if sp["median"] is None else \
            f"{sp['median']:.1%}, {sp['max']:.1%} ({sp['nodes_above_5us']} nodes)"
        lines.append(f"| {m['model']} | {m['precision']} / {m['measured_precision']} | "
                     f"{m['kernels']} "
                     f"({m['kernels_with_timed_node']}) | {m['measured_s'] * 1e6:.0f} us | "
                     f"{m['roofline_s'] * 1e6:.0f} us | {m['measured_s'] / m['roofline_s']:.2f} | "
                     f"{m['eager_forward_s'] * 1e6:.0f} us | {q} | " + " / ".join(
                         f"{p['objective_s'] * 1e6:.0f} us, {p['on_measured']}"
                         for p in m["plans"].values()) + f" | {spread} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=Path("outputs/bench/cuda_store"))
    ap.add_argument("--out", type=Path, default=Path("outputs/bench/cuda_profile"))
    ap.add_argument("--devices", default="h200,h100", help="the first is the GPU measured")
    ap.add_argument("--models", nargs="*", default=MODELS)
    ap.add_argument("--precisions", nargs="*", default=["bf16", "fp32"],
                    help="gpus.precision values to measure in")
    ap.add_argument("--prepare", action="store_true",
                    help="lower, extract and roofline-profile into --store (needs torch-mlir)")
    args = ap.parse_args()
    args.store = args.store.resolve()
    if args.prepare:
        prepare(args)
        return
    import torch
    from hydra import compose, initialize_config_module

    from pimbuild.commands.cli import CONFIG_MODULE
    from pimbuild.frontend.lower import model_params

    def model_params_of(model: str):
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            return model_params(compose("config", overrides=[f"model={model}"]))

    args.model_params = model_params_of
    args.out.mkdir(parents=True, exist_ok=True)
    props = torch.cuda.get_device_properties(0)
    gpu = {"name": props.name, "torch": torch.__version__, "sms": props.multi_processor_count,
           "l2_mb": getattr(props, "L2_cache_size", 0) / 2**20}
    device = args.devices.split(",")[0]
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        spec = compose("config", overrides=[]).device[device]
    print(json.dumps(gpu), flush=True)
    probe_rows = probes(spec)
    for r in probe_rows:
        print(json.dumps(r), flush=True)
    models = []
    for precision in args.precisions:
        for model in args.models:
            try:
                models.append(compare(model, args, device, precision))
                print(json.dumps(models[-1]), flush=True)
            except Exception as e:  # one model's failure is reported, the others still run
                print(f"{model} ({precision}): {type(e).__name__}: {e}", flush=True)
    result = {"gpu": gpu, "probes": probe_rows, "models": models}
    (args.out / "cuda_profile.json").write_text(json.dumps(result, indent=2) + "\n")
    (args.out / "cuda_profile.md").write_text(markdown(gpu, probe_rows, models))
    print(markdown(gpu, probe_rows, models))


if __name__ == "__main__":
    main()
