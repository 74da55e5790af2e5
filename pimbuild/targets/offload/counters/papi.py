"""Counter backend ``papi``: the platform's PAPI events (``platform.events``, by role) in one
event set, no multiplexing, read by the C markers at each region's entry and exit."""

from __future__ import annotations

from pimbuild.codegen import jit
from pimbuild.core.errors import StageError
from pimbuild.targets.offload.counters import CounterRun


def available(run: CounterRun) -> tuple[bool, str]:
    names = list(run.params.events.values())
    n, reason = run.markers.papi_start(names) if names else (-1, "no events")
    run.markers.papi_stop()
    if n > 0:
        return True, f"PAPI counts the platform events {names}"
    status = run.markers.perf_event_status()
    if status:
        reason += f"; PAPI's perf_event component is disabled: {status}"
    return False, f"PAPI cannot count the platform events: {reason}"


def count(run: CounterRun) -> list[dict]:
    """One forward with the platform's events in one PAPI event set."""
    p, markers, program = run.params, run.markers, run.program
    roles, names = list(p.events), list(p.events.values())
    n_events, reason = markers.papi_start(names)
    if n_events < 0:
        raise StageError("profile", f"PAPI cannot count {names}: {reason}")
    try:
        markers.reset()
        jit.invoke(run.engine, program.signature["function"], run.args,
                   program.signature["outputs"])
        values = markers.values(len(program.candidates), n_events)
    finally:
        markers.papi_stop()
    return [{"id": c["id"], "source_op": c["source_op"], "counter_source": "papi",
             "counts": {role: int(values[c["id"], i]) for i, role in enumerate(roles)}}
            for c in program.candidates]
