"""The project's exception hierarchy: every failure a user can cause is a PimbuildError."""

from __future__ import annotations

from pathlib import Path


class PimbuildError(Exception):
    """Base class: a failure reported to the user as one clear message, exit status 1."""


class ConfigError(PimbuildError):
    """Bad input: a configuration value that composes but cannot be used (e.g. a negative
    size), or a file that is not what its format says. Always one line: a line break the
    message quotes from the input (a field named ``"\\r"``) is written as its escape."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(str(message)))


def one_line(text: str) -> str:
    """``text`` with every character ``str.splitlines`` breaks at written as its escape."""
    if len(text.splitlines()) <= 1 and not text.endswith(("\n", "\r")):
        return text
    return "".join(c.encode("unicode_escape").decode() if len(("x" + c + "x").splitlines()) > 1
                   else c for c in text)


class RecipeError(PimbuildError):
    """The model recipe could not be built, traced or exported."""


class StoreError(PimbuildError):
    """The artifact store cannot be read or written (missing, read-only, full disk)."""


class StageError(PimbuildError):
    """A stage failed on its input; carries the saved input IR and a repro command."""

    def __init__(self, stage: str, message: str, saved_input: Path | None = None,
                 repro: str | None = None) -> None:
        self.stage = stage
        self.saved_input = saved_input
        self.repro = repro
        lines = [f"stage '{stage}' failed: {message}"]
        if saved_input is not None:
            lines.append(f"input IR saved to: {saved_input}")
        if repro is not None:
            lines.append(f"reproduce with: {repro}")
        super().__init__("\n".join(lines))


def first_line(e: BaseException) -> str:
    """An exception as one line: its type and the first line of its message (torch's
    messages can carry pages of C++ frames)."""
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0]}" if text else type(e).__name__
