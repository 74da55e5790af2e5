"""Console output shared by every target: the console, the stage table, the notes on what
lower did to the model, and errors. A target prints its own summary
(``Target.summarize``)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

console = Console(highlight=False)
errors = Console(highlight=False, stderr=True)  # one `error:` line per failure, on stderr


def summary_table(rows: list[tuple[str, str, str, str]], title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for col in ("stage", "key", "status", "artifact"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    return table


def cast_line(model: str, cast: dict, dtype: str) -> str:
    """The note that the recipe's own floating-point dtypes were cast to ``model.dtype``
    (``signature.json``'s ``cast``)."""
    parts = [f"{n} {t} parameter(s)/buffer(s)" for t, n in cast.get("parameters", {}).items()]
    parts += [f"input '{k}' in {t}" for k, t in cast.get("inputs", {}).items()]
    return (f"note: model '{model}' has {', '.join(parts)}; pimbuild builds, runs and checks "
            f"it in {dtype} (model.dtype), so its numbers are those of the {dtype} model")


def evaluated_line(model: str, layers: list[str]) -> str:
    """The note that the model was in training mode (``signature.json``'s ``evaluated``)."""
    return (f"note: model '{model}' is in training mode with {', '.join(layers)}; pimbuild "
            f"builds, runs and checks its inference forward (module.eval(): no dropout, "
            f"normalisation by running statistics)")


def error(message: str) -> None:
    errors.print(f"[bold red]error:[/] {message}", soft_wrap=True, markup=True)
