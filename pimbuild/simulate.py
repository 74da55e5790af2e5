"""Stage ``simulate``: what the placement buys under the PIM model (``pimbuild.pim_model``).

For the decided placement at ``pim.cores``: ``T_hybrid`` by eq. 9 with ``T_copy`` under both
copy models (the configured one enters ``T_hybrid``), ``N_region`` and the speedup over
CPU-only; the CPU-only, operator-level and oracle baselines under the same model; per nest
the ground truth (does offloading it alone beat keeping it?) and the rule's agreement with
it; and the speedups of the policy and the baselines over ``sim.cores_sweep`` (re-deciding
at each core count, since C1 and C2 depend on it). Writes ``report.json`` and ``report.md``
and the plots (``pimbuild.report``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pimbuild import decide, pim_model
from pimbuild.nests import Nest, display_name
from pimbuild.report import PLOTS

__all__ = ["PLOTS", "SimInputs", "simulate", "write"]


@dataclass(frozen=True)
class SimInputs:
    nests: list[Nest]
    forward_s: float
    outputs: set[str]
    decisions: dict[str, Any]  # decisions.json
    reinsert: dict[str, Any]  # reinsert.json
    counter_backend: str
    b_cpu_gbps: float


def _with_cores(rule: decide.RuleParams, model: pim_model.PimModel, cores: int):
    return dataclasses.replace(rule, n_core=cores), dataclasses.replace(model, n_core=cores)


def evaluate(inp: SimInputs, pim: set[int], model: pim_model.PimModel,
             copy_model: str) -> dict[str, Any]:
    b = pim_model.hybrid(inp.nests, pim, inp.forward_s, model, copy_model, inp.outputs)
    return {"speedup": b.speedup, "t_hybrid_s": b.t_hybrid_s, "t_cpu_only_s": b.t_cpu_only_s,
            "t_host_s": b.t_host_s,
            "t_pim_s": b.t_pim_s, "t_copy_s": b.t_copy_s, "t_switch_s": b.t_switch_s,
            "n_region": b.n_region, "fetch_bytes": b.fetch_bytes,
            "flush_bytes": b.flush_bytes}


def placement(policy: str, inp: SimInputs, rule: decide.RuleParams,
              model: pim_model.PimModel, copy_model: str) -> set[int]:
    return {d.id for d in decide.place(policy, inp.nests, rule, inp.forward_s, model,
                                       copy_model, inp.outputs) if d.target == "pim"}


def agreement(inp: SimInputs, pim: set[int], truth: set[int]) -> dict[str, Any]:
    ids = {n.id for n in inp.nests}
    tp, fp = len(pim & truth), len(pim - truth)
    fn, tn = len(truth - pim), len(ids - pim - truth)
    return {"agree": tp + tn, "total": len(ids), "accuracy": (tp + tn) / max(len(ids), 1),
            "true_positives": tp, "false_positives": fp, "false_negatives": fn,
            "true_negatives": tn}


def simulate(inp: SimInputs, policy: str, rule: decide.RuleParams,
             model: pim_model.PimModel, copy_model: str, cores_sweep: list[int]
             ) -> dict[str, Any]:
    pim = set(inp.decisions["offloaded"])
    main = evaluate(inp, pim, model, copy_model)
    other = "resident" if copy_model == "upper_bound" else "upper_bound"
    main_other = evaluate(inp, pim, model, other)
    truth = {n.id for n in inp.nests if pim_model.beneficial(
        n, inp.nests, inp.forward_s, model, copy_model, inp.outputs)}
    baselines = {name: evaluate(inp, placement(name, inp, rule, model, copy_model), model,
                                copy_model)
                 for name in ("cpu", "operator", "oracle")}
    sweep = []
    for cores in sorted({*cores_sweep, model.n_core}):
        r, m = _with_cores(rule, model, cores)
        row = {"cores": cores}
        for name in dict.fromkeys((policy, "operator", "oracle")):
            chosen = placement(name, inp, r, m, copy_model)
            row[name] = evaluate(inp, chosen, m, copy_model) | {"offloaded": sorted(chosen)}
        sweep.append(row)
    decisions = {d["id"]: d for d in inp.decisions["decisions"]}
    captured = sum(n.t_cpu_s for n in inp.nests if n.id in pim)
    per_nest = [{
        "id": n.id, "source_op": n.source_op, "source_module": n.source_module,
        "target": decisions[n.id]["target"], "decided_by": decisions[n.id]["decided_by"],
        "reason": decisions[n.id]["reason"], "t_cpu_s": n.t_cpu_s,
        "t_pim_s": pim_model.t_pim(n, model),
        "c1_bound_s": decide.c1_bound_s(n.n_total, n.invocations, rule),
        "bw_read_gbps": n.bw_read_gbps, "store_bound": n.store_bound,
        "beneficial": n.id in truth} for n in inp.nests]
    return {
        "policy": policy, "cores": model.n_core, "copy_model": copy_model,
        **{k: main[k] for k in ("speedup", "t_hybrid_s", "t_host_s", "t_pim_s", "t_copy_s",
                                "t_switch_s", "n_region")},
        "t_cpu_only_s": main["t_cpu_only_s"],
        "forward_median_s": inp.forward_s,
        "t_copy": {copy_model: main["t_copy_s"], other: main_other["t_copy_s"]},
        "offloaded": sorted(pim),
        "offloaded_sources": list(dict.fromkeys(
            display_name(n.source_module, n.source_op) for n in inp.nests if n.id in pim)),
        "offloaded_share_of_nests": len(pim) / max(len(inp.nests), 1),
        "captured_share_of_cpu_time": captured / main["t_cpu_only_s"],
        "agreement": agreement(inp, pim, truth),
        "baselines": {name: b["speedup"] for name, b in baselines.items()},
        "baseline_breakdowns": baselines,
        "theta_gbps": rule.theta_gbps, "b_cpu_gbps": inp.b_cpu_gbps,
        "counter_backend": inp.counter_backend,
        "segments": inp.reinsert["segments"],
        "hybrid_check": inp.reinsert["check"],
        "model": dataclasses.asdict(model),
        "sweep": sweep,
        "nests": per_nest,
    }


def write(report: dict[str, Any], out_dir: Path) -> None:
    from pimbuild import report as render

    (out_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    (out_dir / "report.md").write_text(render.markdown(report))
    render.plots(report, out_dir)
