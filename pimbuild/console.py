"""Console output: the run summary, the candidates table, errors."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

console = Console(highlight=False)


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.3g}"


def short_op(target: str) -> str:
    """``aten._softmax.default`` -> ``_softmax``."""
    parts = target.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "aten" else target


def _fmt(value: str, spec: str) -> str:
    return format(float(value), spec) if value not in ("", None) else "-"


def candidates_table(candidates: dict, title: str, profile: dict[int, dict] | None = None
                     ) -> Table:
    """One row per nest; with ``profile`` (timing + counters rows by id), its measurements."""
    table = Table(title=title, title_justify="left", pad_edge=False)
    columns = ["id", "source", "dims", "n_iter", "n_total", "moved MB", "ld/st/ar/m"]
    if profile:
        columns += ["T_cpu ms", "share", "BW GB/s", "store"]
    for col in columns:
        table.add_column(col, justify="left" if col in ("source", "dims") else "right")
    for c in candidates["candidates"]:
        mix = c["op_mix"]
        source = short_op(c["source_op"])
        if c["source_module"]:
            source = f"{c['source_module']}.{source}"
        row = [str(c["id"]), source, "x".join(map(str, c["parallel_dims"])),
               f"{c['n_iter']:,}", f"{c['n_total']:,}", _mb(c["moved_bytes"]),
               f"{mix['loads']}/{mix['stores']}/{mix['arith']}/{mix['math']}"]
        if profile:
            m = profile[c["id"]]
            row += [_fmt(float(m["median_s"]) * 1e3, ".3g"), _fmt(m["share"], ".1%"),
                    _fmt(m["bw_read_gbps"], ".3g"), _fmt(m["store_bound"], ".2f")]
        table.add_row(*row)
    return table


def summary_table(rows: list[tuple[str, str, str, str]], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("stage", "key", "status", "artifact"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    return table


def error(message: str) -> None:
    console.print(f"[bold red]error:[/] {message}", soft_wrap=True)
