"""``pimbuild-kernels``: the GPU kernel-time model's command (docs/gpus.md).

    pimbuild-kernels data [--neusight DIR --vidur DIR... --measured DIR]
                          [--aiconfigurator WHEEL --llmservingsim DIR]
    pimbuild-kernels fit [--exclude L4,A40] [--out FILE]
    pimbuild-kernels evaluate [--holdout L4,...] [--markdown FILE] [--json FILE]
    pimbuild-kernels predict OPS.csv --device l40s [--config-dir DIR] [--out FILE]
    pimbuild-kernels export RUN_DIR --device a100 --out a100.json
    pimbuild-kernels merge A.json B.json ... --out FILE

``data`` rebuilds the compact measured files from the public sources: NeuSight's repository
and Vidur's with its forks (checkouts or bare clones) into ``measured_ops.csv.gz``,
AIConfigurator's wheel (or its unpacked folder) and LLMServingSim's repository into
``engine_kernels.parquet``, each without the rows no GPU could produce
(``sources.plausible``); ``fit`` fits on both, leaving out
``--exclude``d GPUs, and writes the fit (to ``kernel_model.json`` here unless ``--out`` says
where: never over the shipped one by default) with its provenance, the families whose learned
correction pays on held-out GPUs, and the 80% band predictions carry (leave-one-GPU-out);
``evaluate`` prints the leave-one-GPU-out table, the per-layer error on Vidur's LLaMA-2-7B
layers and the measured pairs' Fig. 2 shares; ``predict`` writes each op of an ops CSV with
the time a build would use (measured, interpolated or predicted), the model's prediction with
its band, and the spec roofline's; ``export`` writes the kernel-time table of a device a
build measured (``gpus.backend=cuda``; RUN_DIR is the run folder holding
``manifest.json``) and ``merge`` joins tables of one device
(``pimbuild.targets.gpus.kerneltime.tables``). Bad input is one ``error:`` line and exit 1,
with nothing written.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from pimbuild.core.errors import ConfigError
from pimbuild.targets.gpus.kerneltime import clock, evaluate, grid, model, ops, sources, tables


def _names(text: str | None) -> list[str]:
    return [t for t in (text or "").split(",") if t]


def _check_devices(names: list[str], gpus: dict[str, ops.Gpu]) -> None:
    unknown = [n for n in names if n not in gpus]
    if unknown:
        raise ConfigError(f"unknown measured GPU(s) {', '.join(unknown)} (choices: "
                          f"{', '.join(gpus)})")


def _writable(path: Path) -> None:
    """A ConfigError, before any work, if ``path``'s folder does not exist."""
    if not Path(path).resolve().parent.is_dir():
        raise ConfigError(f"cannot write {path}: its folder {Path(path).parent} does not exist")


def cmd_data(args: argparse.Namespace) -> None:
    if not (args.neusight or args.vidur or args.aiconfigurator or args.llmservingsim):
        raise ConfigError("name a source: --neusight DIR --vidur DIR [--vidur FORK ...] "
                          "[--measured DIR] and/or --aiconfigurator WHEEL --llmservingsim DIR")
    if bool(args.neusight) != bool(args.vidur):
        raise ConfigError("--neusight and --vidur rebuild one file together: give both")
    if bool(args.aiconfigurator) != bool(args.llmservingsim):
        raise ConfigError("--aiconfigurator and --llmservingsim rebuild one file together: "
                          "give both")
    for out in (args.out, args.engine_out):
        _writable(out)
    gpus = sources.devices()
    if args.neusight:
        rows = [*sources.neusight(args.neusight), *sources.vidur(*args.vidur)]
        for folder in args.measured:
            rows += sources.measured(folder)
        rows, dropped = sources.plausible(rows, gpus)
        sources.write(rows, args.out)
        print(f"wrote {args.out}: {len(rows)} rows{_dropped(dropped)}")
    if args.aiconfigurator:
        rows = [*sources.aiconfigurator(args.aiconfigurator),
                *sources.llmservingsim(args.llmservingsim)]
        rows, dropped = sources.plausible(rows, gpus)
        sources.write_engine(rows, args.engine_out)
        print(f"wrote {args.engine_out}: {len(rows)} rows of "
              f"{len({r['device'] for r in rows})} GPUs{_dropped(dropped)}")


def _dropped(dropped: dict[str, int]) -> str:
    return "".join(f"; {n} implausible {s} rows dropped" for s, n in sorted(dropped.items()))


def logo(rows: list[dict[str, Any]], gpus: dict[str, ops.Gpu], devices: list[str],
         progress: bool = True) -> dict[str, Any]:
    results = {}
    for i, device in enumerate(devices):
        began = time.perf_counter()
        results[device] = evaluate.held_out(rows, gpus, device)
        if progress:
            print(f"[{i + 1}/{len(devices)}] {device} held out: fitted in "
                  f"{time.perf_counter() - began:.1f} s", file=sys.stderr)
    return results


def training_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """The measured ops and a sample of the engine kernels (``sources.engine_rows``)."""
    return sources.load(args.data) + sources.engine_rows(sources.load_engine(args.engine))


def cmd_fit(args: argparse.Namespace) -> None:
    _writable(args.out)
    rows, gpus = training_rows(args), sources.devices()
    _check_devices(args.exclude, gpus)
    rows = [r for r in rows if r["device"] not in args.exclude]
    if not rows:
        raise ConfigError("no measured rows are left to fit on")
    began = time.perf_counter()
    seen = sorted({r["device"] for r in rows})
    learned, band = model.FAMILIES, {}
    if args.band:
        results = logo(rows, gpus, seen)
        learned = evaluate.choose(results, seen)
        band = evaluate.pooled(results, learned, evaluate.nested(results))
    fitted = model.fit(rows, gpus, families=learned)
    model.save(fitted, args.out, {
        "data": Path(args.data).name, "data_sha256": model.digest(args.data),
        "engine": Path(args.engine).name, "engine_sha256": model.digest(args.engine),
        "excluded": args.exclude, "held_out_error": band,
        "fitted": datetime.date.today().isoformat(),
        "sources": sources.cited(rows)})
    print(f"wrote {args.out}: fitted on {len(rows)} rows of {len(seen)} GPUs in "
          f"{time.perf_counter() - began:.1f} s; the learned correction for "
          f"{', '.join(learned) or 'no family'}")


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def markdown(tab: list[dict], lays: list[dict], pairs: list[dict],
             nest: dict[str, dict[str, Any]]) -> str:
    """The leave-one-GPU-out tables (``chosen``: the nested choice of ``evaluate.nested``)."""
    lines = ["| held-out GPU | source | family | rows | median err: roofline / physics / "
             "fitted / chosen | within 20%: roofline / physics / chosen | in the 80% band |",
             "|---|---|---|---:|---|---|---:|"]
    for r in tab:
        med = " / ".join(_pct(r[p]["median"]) for p in evaluate.PREDICTORS)
        w20 = " / ".join(_pct(r[p]["within_20"]) for p in ("roofline", "physics", "chosen"))
        cover = nest.get(r["device"], {}).get("coverage", {}).get(r["family"])
        lines.append(f"| {r['device']} | {r['source']} | {r['family']} | {r['rows']} | {med} | "
                     f"{w20} | {'' if cover is None else _pct(cover)} |")
    lines += ["", "| held-out GPU | LLaMA-2-7B layers | median layer err: roofline / physics / "
              "fitted / chosen | within 20%: roofline / chosen |", "|---|---:|---|---|"]
    for r in lays:
        med = " / ".join(_pct(r[p]["median"]) for p in evaluate.PREDICTORS)
        lines.append(f"| {r['device']} | {r['layers']} | {med} | "
                     f"{_pct(r['roofline']['within_20'])} / {_pct(r['chosen']['within_20'])} |")
    lines += ["", "| first | second | source | shapes | faster on second, by count: measured "
              "/ roofline / chosen | by first's time: measured / roofline / chosen | picks "
              "the measured winner: roofline / chosen |", "|---|---|---|---:|---|---|---|"]
    for r in pairs:
        cnt = " / ".join(_pct(r[p]["share_by_count"]) for p in ("measured", "roofline",
                                                               "chosen"))
        tim = " / ".join(_pct(r[p]["share_by_time"]) for p in ("measured", "roofline",
                                                              "chosen"))
        lines.append(f"| {r['first']} | {r['second']} | {r['source']} | {r['shapes']} | {cnt} "
                     f"| {tim} | {_pct(r['roofline']['picks_winner'])} / "
                     f"{_pct(r['chosen']['picks_winner'])} |")
    return "\n".join(lines) + "\n"


def cmd_evaluate(args: argparse.Namespace) -> None:
    for out in (args.markdown, args.json):
        if out:
            _writable(out)
    rows, gpus = training_rows(args), sources.devices()
    devices = args.holdout or sorted({r["device"] for r in rows})
    _check_devices(devices, gpus)
    began = time.perf_counter()
    results = logo(rows, gpus, devices)
    nest = evaluate.nested(results)
    tab, lays = evaluate.table(results), evaluate.layers(results)
    prs = evaluate.pairs(results)
    grids = grid.build(sources.load_engine(args.engine), gpus)
    models = {d: r["model"] for d, r in results.items()}
    engine = evaluate.engine_layers(models, grids, gpus)
    fig = fig2_rows(grids, models, gpus)
    text = markdown(tab, lays, prs, nest) + engine_markdown(engine, fig)
    print(text)
    print(f"{len(devices)} fits in {time.perf_counter() - began:.1f} s", file=sys.stderr)
    if args.markdown:
        args.markdown.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"table": tab, "layers": lays, "pairs": prs,
                                         "nested": nest, "engine_layers": engine,
                                         "fig2": fig,
                                         "band": evaluate.pooled(results, coverage=nest)},
                                        indent=1) + "\n")


FIG2_PAIR = ("A100-SXM-80GB", "L40S")  # FluidGPU's pair, both measured on the same shapes


def fig2_rows(grids: dict[str, Any], models: dict[str, Any], gpus: dict[str, ops.Gpu]
              ) -> dict[str, Any]:
    """Fig. 2 on the measured pair: measured (the grids), the roofline, and the models fitted
    without each GPU (where both were held out), beside the paper's shares."""
    first, second = FIG2_PAIR
    if first not in grids or second not in grids:
        return {}

    def measured(d: str, found: list[ops.Op]) -> Any:
        return evaluate.measured_times(grids[d], found)

    def roofline(d: str, found: list[ops.Op]) -> Any:
        return [model.roofline(o, gpus[d]) for o in found]

    def predicted(d: str, found: list[ops.Op]) -> Any:
        return models[d].predict(found, [gpus[d]] * len(found))

    both = {label for _, label, found in evaluate.scenarios()
            if measured(first, found) is not None and measured(second, found) is not None}
    out = {"pair": [first, second], "paper": evaluate.PAPER_FIG2,
           "measured": evaluate.fig2(first, second, measured),
           "roofline": evaluate.fig2(first, second, roofline, both)}
    if first in models and second in models:
        out["predicted"] = evaluate.fig2(first, second, predicted, both)
    return out


def engine_markdown(engine: list[dict], fig: dict[str, Any]) -> str:
    lines = ["", "| held-out GPU | Llama-3-8B layers (GEMMs + attention) | median layer err: "
             "roofline / physics / chosen | worst: roofline / chosen |", "|---|---:|---|---|"]
    for r in engine:
        med = " / ".join(_pct(r[p]["median"]) for p in ("roofline", "physics", "chosen"))
        lines.append(f"| {r['device']} | {r['layers']} | {med} | {_pct(r['roofline']['max'])} "
                     f"/ {_pct(r['chosen']['max'])} |")
    if fig:
        lines += ["", f"| Fig. 2: {fig['pair'][1]} faster than {fig['pair'][0]} | kernels | "
                  "by count | by the first's time |", "|---|---:|---:|---:|"]
        for source in ("measured", "roofline", "predicted"):
            for phase, v in fig.get(source, {}).items():
                lines.append(f"| {source}, {phase} | {v['kernels']} | {_pct(v['by_count'])} | "
                             f"{_pct(v['by_time'])} |")
        p = fig["paper"]
        lines.append(f"| FluidGPU's paper (Llama-3-8B on A100 + L40S) | | all "
                     f"{_pct(p['all_by_count'])}, decode {_pct(p['decode_by_count'])}, "
                     f"prefill {_pct(p['prefill_by_count'])} | all {_pct(p['all_by_time'])} |")
    return "\n".join(lines) + "\n"


def cmd_predict(args: argparse.Namespace) -> None:
    gpu, _, measured_as = clock.catalogue_gpu(args.device, args.config_dir)
    out = args.out or args.ops.with_name(args.ops.stem + f"_{args.device}.csv")
    _writable(out)
    found, _ = ops.read(args.ops)
    fitted = model.load(args.model)
    began = time.perf_counter()
    seconds = fitted.predict(found, [gpu] * len(found))
    elapsed = time.perf_counter() - began
    held = clock.measured_grid(measured_as)
    band = fitted.provenance.get("held_out_error", {})
    tmp = out.with_name(out.name + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow([*ops.COLUMNS, "time_us", "from", "predicted_us", "low_us", "high_us",
                    "roofline_us"])
        counts: dict[str, int] = {}
        for o, t in zip(found, seconds, strict=True):
            hit = held.lookup(o) if held else None
            hit = (held.cold(o, hit[0]), hit[1]) if hit else None
            how = hit[1] if hit else "predicted"
            counts[how] = counts.get(how, 0) + 1
            q = band.get(o.family, {})
            lo, hi = (math.exp(q["low"]), math.exp(q["high"])) if "low" in q \
                else (math.nan, math.nan)
            w.writerow([o.op, o.dtype, *(getattr(o, d) if d in o.dims else ""
                                         for d in ops.COLUMNS[2:]),
                        f"{(hit[0] if hit else t) * 1e6:.3f}", how, f"{t * 1e6:.3f}",
                        f"{t * lo * 1e6:.3f}", f"{t * hi * 1e6:.3f}",
                        f"{model.roofline(o, gpu) * 1e6:.3f}"])
    tmp.replace(out)
    print(f"wrote {out}: {len(found)} ops on {gpu.name} ("
          + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
          + f"); the model predicted them in {elapsed:.2f} s")


def _stage_dir(run: Path, stage: str) -> Path:
    try:
        manifest = json.loads((run / "manifest.json").read_text())
        return Path(manifest["stages"][stage]["dir"])
    except OSError:
        raise ConfigError(f"{run} has no manifest.json: name a run folder "
                          f"(outputs/runs/<model>/<time>)") from None
    except (ValueError, KeyError):
        raise ConfigError(f"{run}/manifest.json has no '{stage}' stage: build it with "
                          f"system=gpus first") from None


def cmd_export(args: argparse.Namespace) -> None:
    profile, extract = _stage_dir(args.run, "profile"), _stage_dir(args.run, "extract")
    info = json.loads((profile / "profile.json").read_text())
    if args.device not in info.get("measured", []) or info.get("backend") != "cuda":
        raise ConfigError(f"the build in {args.run} did not measure '{args.device}' "
                          f"(backend {info.get('backend')}, measured: "
                          f"{', '.join(info.get('measured', [])) or 'none'}); a table holds "
                          f"measured times only")
    data = json.loads((extract / "kernels.json").read_text())
    with (profile / "kernel_times.csv").open() as f:
        seconds = [float(r[f"t_{args.device}_s"]) for r in csv.DictReader(f)]
    device = info.get("device_names", {}).get(args.device)
    if device is None:
        raise ConfigError(f"{profile}/profile.json does not name device '{args.device}' "
                          f"(built before tables existed: rebuild the profile)")
    table = tables.make({**info, "device": device}, data["kernels"], seconds,
                        info.get("precision", ""))
    tables.write(table, args.out)
    print(f"wrote {args.out}: {len(table['kernels'])} kernels of {device} measured on "
          f"{info.get('gpu')}")


def cmd_merge(args: argparse.Namespace) -> None:
    loaded = [tables.load(p) for p in args.tables]
    merged, repeated = tables.merge(loaded, [str(p) for p in args.tables])
    for note in tables.versions_differ(loaded):
        print(f"warning: {note}", file=sys.stderr)
    tables.write(merged, args.out)
    print(f"wrote {args.out}: {len(merged['kernels'])} kernels of {merged['device']} "
          f"({repeated} measured in more than one table: the least time kept)")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="pimbuild-kernels", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("data", help="rebuild the measured files from the public sources")
    d.add_argument("--neusight", type=Path, help="NeuSight's repository")
    d.add_argument("--vidur", type=Path, action="append", default=[],
                   help="Vidur's repository, then any forks with other GPUs (repeatable)")
    d.add_argument("--llmservingsim", type=Path, help="LLMServingSim's repository")
    d.add_argument("--measured", type=Path, action="append", default=[],
                   help="a folder of bench/measure_ops.py's ops_*.csv")
    d.add_argument("--aiconfigurator", type=Path,
                   help="aiconfigurator-core's wheel (pip download --no-deps "
                        "aiconfigurator-core==0.12.0) or its unpacked folder")
    d.add_argument("--out", type=Path, default=sources.MEASURED)
    d.add_argument("--engine-out", type=Path, default=sources.ENGINE)
    f = sub.add_parser("fit", help="fit the model (and its held-out band)")
    f.add_argument("--data", type=Path, default=sources.MEASURED)
    f.add_argument("--engine", type=Path, default=sources.ENGINE)
    f.add_argument("--exclude", type=_names, default=[], help="GPUs left out, comma-separated")
    f.add_argument("--out", type=Path, default=Path("kernel_model.json"),
                   help="where the fit goes (kernel_model.json here; the shipped one is "
                        f"{model.SHIPPED})")
    f.add_argument("--no-band", dest="band", action="store_false",
                   help="skip the leave-one-GPU-out runs that give the error band")
    e = sub.add_parser("evaluate", help="leave-one-GPU-out errors beside the roofline")
    e.add_argument("--data", type=Path, default=sources.MEASURED)
    e.add_argument("--engine", type=Path, default=sources.ENGINE)
    e.add_argument("--holdout", type=_names, default=[], help="GPUs to hold out (all)")
    e.add_argument("--markdown", type=Path)
    e.add_argument("--json", type=Path)
    p = sub.add_parser("predict", help="predict the ops of an ops CSV on a device")
    p.add_argument("ops", type=Path)
    p.add_argument("--device", required=True)
    p.add_argument("--config-dir", type=Path)
    p.add_argument("--model", type=Path)
    p.add_argument("--out", type=Path)
    x = sub.add_parser("export", help="a build's measured device as a kernel-time table")
    x.add_argument("run", type=Path)
    x.add_argument("--device", required=True, help="its key in `devices` (a100)")
    x.add_argument("--out", type=Path, required=True)
    m = sub.add_parser("merge", help="join kernel-time tables of one device")
    m.add_argument("tables", type=Path, nargs="+")
    m.add_argument("--out", type=Path, required=True)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        {"data": cmd_data, "fit": cmd_fit, "evaluate": cmd_evaluate,
         "predict": cmd_predict, "export": cmd_export, "merge": cmd_merge}[args.cmd](args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a full disk, a folder without write permission, ...
        name = str(e.filename or "").removesuffix(".tmp")
        print(f"error: {name}: {e.strerror}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
