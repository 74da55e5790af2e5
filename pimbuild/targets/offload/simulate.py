"""Stage ``simulate``: what the placement buys under the target's model
(``pimbuild.targets.offload.hybrid``).

For the decided placement: ``T_hybrid`` by eq. 9 with ``T_copy`` under both built-in copy
models (the configured one enters ``T_hybrid``), ``N_region`` and the speedup over CPU-only
(and over PyTorch eager, from the ``eager`` stage's comparison of the two forwards:
``over_eager``);
the target's baseline policies under the same model; per nest the ground truth (does
offloading it alone beat keeping it?) and the policy's agreement with it; and the speedups
of the policy and the baselines over ``sim.cores_sweep`` (re-deciding at each size, since the
rule depends on it). Writes ``report.json``; the target renders ``report.md`` and its plots;
with ``timeline=true``, ``timeline.json`` holds the decided placement's forward as a
timeline (``pimbuild.targets.offload.timeline``).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from pimbuild.core.stage import Inputs
from pimbuild.core.trace import OPEN_WITH
from pimbuild.targets.offload import decide, hybrid, policies, summary
from pimbuild.targets.offload.copymodels import UPPER_BOUND, CopyModel
from pimbuild.targets.offload.nests import display_name
from pimbuild.targets.offload.policies import PolicyContext
from pimbuild.targets.offload.timeline import timeline

NAME = "simulate"
READS = ("extract", "profile", "eager", "calibrate", "decide", "reinsert")
WRITES = ("report.json", "report.md")


@dataclass(frozen=True)
class Params:
    decide: decide.Params  # the policy, the target and the copy model, as decide has them
    cores_sweep: tuple[int, ...]  # target sizes of the report's sweep
    timeline: bool = False  # also write timeline.json: one forward's schedule (timeline=true)


def _counted(names: Iterable[str]) -> list[str]:
    """Each name once, in order, with how many times it came where more than once
    (``self_attn.cat x2``: two offloaded nests from one operator)."""
    return [name if k == 1 else f"{name} x{k}" for name, k in Counter(names).items()]


def params(cfg: DictConfig) -> Params:
    return Params(decide=decide.params(cfg), cores_sweep=tuple(cfg.sim.cores_sweep),
                  timeline=cfg.timeline)


def evaluate(ctx: PolicyContext, offloaded: set[int]) -> dict[str, Any]:
    """Eq. 9's terms for a placement, named by the target's sides (``t_host_s``, ...)."""
    t = ctx.target
    b = hybrid.hybrid(ctx.nests, offloaded, ctx.forward_s, t, ctx.copy_model, ctx.outputs)
    return {"speedup": b.speedup, "t_hybrid_s": b.t_hybrid_s, "t_cpu_only_s": b.t_cpu_only_s,
            f"t_{t.host}_s": b.t_host_s, f"t_{t.device}_s": b.t_device_s,
            "t_copy_s": b.t_copy_s, "t_switch_s": b.t_switch_s, "n_region": b.n_region,
            "fetch_bytes": b.fetch_bytes, "flush_bytes": b.flush_bytes}


def placement(name: str, ctx: PolicyContext) -> set[int]:
    return policies.place(name, ctx).offloaded(ctx)


def agreement(ctx: PolicyContext, offloaded: set[int], truth: set[int]) -> dict[str, Any]:
    ids = {n.id for n in ctx.nests}
    tp, fp = len(offloaded & truth), len(offloaded - truth)
    fn, tn = len(truth - offloaded), len(ids - offloaded - truth)
    return {"agree": tp + tn, "total": len(ids), "accuracy": (tp + tn) / max(len(ids), 1),
            "true_positives": tp, "false_positives": fp, "false_negatives": fn,
            "true_negatives": tn}


def false_positives(ctx: PolicyContext, offloaded: set[int], truth: set[int]
                    ) -> list[dict[str, Any]]:
    """The offloaded nests the ground truth keeps on the host, costliest first, each with
    what offloading it alone adds to T_hybrid (``loss_s``): where a placement loses time."""
    rows = []
    for n in ctx.nests:
        if n.id in offloaded and n.id not in truth:
            alone = hybrid.hybrid(ctx.nests, {n.id}, ctx.forward_s, ctx.target,
                                  ctx.copy_model, ctx.outputs)
            rows.append({"id": n.id, "source": display_name(n.source_module, n.source_op),
                         "loss_s": alone.t_hybrid_s - alone.t_cpu_only_s})
    return sorted(rows, key=lambda r: -r["loss_s"])


def sweep(ctx: PolicyContext, sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    """The policy and the baselines re-decided and evaluated at each target size."""
    t = ctx.target
    rows = []
    for units in sorted({*sizes, t.units}):
        scaled = ctx.with_units(units)
        row: dict[str, Any] = {t.units_name: units}
        for name in dict.fromkeys((ctx.policy.name, *t.baselines[1:])):
            chosen = placement(name, scaled)
            row[name] = evaluate(scaled, chosen) | {"offloaded": sorted(chosen)}
        rows.append(row)
    return rows


def over_eager(speedup: float, eager: dict[str, Any] | None) -> dict[str, Any] | None:
    """The speedup over PyTorch eager's forward on the host: the speedup over CPU-only
    divided by the CPU-only / eager ratio the ``eager`` stage measured, with
    that ratio; None where it was not measured."""
    if not eager:
        return None
    return {"speedup": speedup / eager["ratio"], "cpu_only_over_eager": eager["ratio"],
            "ratio_p25": eager["ratio_p25"], "ratio_p75": eager["ratio_p75"],
            "rounds": eager["rounds"], "eager_median_s": eager["eager_median_s"],
            "lowered_median_s": eager["lowered_median_s"]}


def simulate(ctx: PolicyContext, decisions: dict[str, Any], reinsert: dict[str, Any],
             counter_backend: str, sizes: tuple[int, ...],
             eager: dict[str, Any] | None = None) -> dict[str, Any]:
    t, name = ctx.target, ctx.policy.name
    offloaded = set(decisions["offloaded"])
    main = evaluate(ctx, offloaded)
    other_model = (CopyModel("resident") if ctx.copy_model.name == UPPER_BOUND.name
                   else UPPER_BOUND)
    other = evaluate(PolicyContext(ctx.nests, ctx.forward_s, ctx.outputs, ctx.b_cpu_gbps,
                                   ctx.policy, t, other_model), offloaded)
    truth = {n.id for n in ctx.nests if hybrid.beneficial(
        n, ctx.nests, ctx.forward_s, t, ctx.copy_model, ctx.outputs)}
    baselines = {b: evaluate(ctx, placement(b, ctx)) for b in t.baselines}
    by_id = {d["id"]: d for d in decisions["decisions"]}
    captured = sum(n.t_cpu_s for n in ctx.nests if n.id in offloaded)
    per_nest = [{
        "id": n.id, "source_op": n.source_op, "source_module": n.source_module,
        "target": by_id[n.id]["target"], "decided_by": by_id[n.id]["decided_by"],
        "reason": by_id[n.id]["reason"], "borderline": by_id[n.id].get("borderline", False),
        "t_cpu_s": n.t_cpu_s, "t_spread": n.t_spread,
        **t.report_columns(n, ctx.policy),
        "bw_read_gbps": n.bw_read_gbps, "store_bound": n.store_bound,
        "beneficial": n.id in truth} for n in ctx.nests]
    return {
        "policy": name, t.units_name: t.units, "copy_model": ctx.copy_model.name,
        **{k: main[k] for k in ("speedup", "t_hybrid_s", f"t_{t.host}_s",
                                f"t_{t.device}_s", "t_copy_s", "t_switch_s", "n_region")},
        "t_cpu_only_s": main["t_cpu_only_s"],
        "over_eager": over_eager(main["speedup"], eager),
        "forward_s": ctx.forward_s,
        "t_copy": {ctx.copy_model.name: main["t_copy_s"], other_model.name: other["t_copy_s"]},
        "offloaded": sorted(offloaded),
        "offloaded_sources": _counted(display_name(n.source_module, n.source_op)
                                      for n in ctx.nests if n.id in offloaded),
        "offloaded_share_of_nests": len(offloaded) / max(len(ctx.nests), 1),
        "borderline": decisions.get("borderline", []),
        "captured_share_of_cpu_time": captured / main["t_cpu_only_s"],
        "agreement": agreement(ctx, offloaded, truth),
        "false_positives": false_positives(ctx, offloaded, truth),
        "baselines": {b: r["speedup"] for b, r in baselines.items()},
        "baseline_breakdowns": baselines,
        "theta_gbps": ctx.policy.theta(ctx.b_cpu_gbps), "b_cpu_gbps": ctx.b_cpu_gbps,
        "i_compute": ctx.policy.i_compute,
        "counter_backend": counter_backend,
        "segments": reinsert["segments"],
        "hybrid_check": reinsert["check"],
        "model": t.describe(),
        "sweep": sweep(ctx, sizes),
        "nests": per_nest,
    }


def run(inputs: Inputs, p: Params, out: Path) -> None:
    ctx = decide.context(inputs, p.decide)
    info = json.loads((inputs["profile"] / "profile.json").read_text())
    report = simulate(ctx, json.loads((inputs["decide"] / "decisions.json").read_text()),
                      json.loads((inputs["reinsert"] / "reinsert.json").read_text()),
                      info["counter_backend"], p.cores_sweep,
                      json.loads((inputs["eager"] / "eager.json").read_text())["comparison"])
    report |= {"sweep_columns": summary.sweep_columns(report),
               "headline": summary.headline(report)}  # what a sweep's summary shows
    if p.timeline:
        drawn = timeline(ctx.nests, set(report["offloaded"]), ctx.forward_s, ctx.target,
                         ctx.copy_model, ctx.outputs)
        report["timeline"] = {"file": "timeline.json", "open_with": OPEN_WITH,
                              "events": drawn.write(out / "timeline.json",
                                                    policy=report["policy"])}
    (out / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    p.decide.target.render(report, out)
