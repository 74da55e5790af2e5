"""One schema per input format, one validator for all: each file format a build or a command
reads (kernel-time tables, device files, ops CSVs, traces, fitted models) is a pydantic model
with the code that reads it, and ``check`` turns the first thing wrong into one ConfigError
line naming the file, the field and what it must be.

Types are exact (``Strict``): a bool is not a number, the text "12" is not a count, a number
is finite, a field the format does not have is refused (with the nearest one it has) and a
field it needs is asked for. Ranges are written once, as the config's are, ``(comparison,
bound)`` or ``(comparison, bound, upper)`` (``pimbuild.build.config.RANGES``), and ``number`` turns
one into a field's constraint, so that a config group and the file of the same thing (a
device) share them (``model_of``)."""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from typing import Annotated, Any

from omegaconf import MISSING
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from pimbuild.core.errors import ConfigError

Range = tuple[Any, ...]  # (">" or ">=", bound) or (">" or ">=", bound, upper)


class Strict(BaseModel):
    """A record of an input format: exact types, finite numbers, no unknown fields."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True)


def constraint(r: Range) -> dict[str, float]:
    """Field constraints of range ``r``."""
    op, bound, *upper = r
    out = {"gt" if op == ">" else "ge": bound}
    if upper:
        out["le"] = upper[0]
    return out


def number(r: Range | None = None, integer: bool = False) -> Any:
    """A number type (whole if ``integer``) in range ``r``."""
    return Annotated[int if integer else float, Field(**constraint(r) if r else {})]


def model_of(schema: type, ranges: dict[str, Range], name: str) -> type[BaseModel]:
    """The pydantic model of a config dataclass ``schema``: its fields, required where the
    dataclass says ``MISSING`` (or gives no default), numbers in ``ranges`` (field ->
    range)."""
    hints = typing.get_type_hints(schema)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(schema):
        kind = hints[f.name]
        if kind in (int, float):
            kind = number(ranges.get(f.name), integer=kind is int)
        if f.default_factory is not dataclasses.MISSING:
            default: Any = Field(default_factory=f.default_factory)
        else:
            default = ... if f.default in (MISSING, dataclasses.MISSING) else f.default
        fields[f.name] = (kind, default)
    return create_model(name, __base__=Strict, **fields)


def check(model: type[BaseModel], data: Any, where: str, text: bool = False) -> Any:
    """``data`` as a ``model``; else a ConfigError ``<where>: <field> <what is wrong>``.
    ``text``: the values were read as text (a CSV row), so a number may be written as one,
    but it is still finite, in range, and whole where the format counts."""
    try:
        return model.model_validate(data, strict=not text)
    except ValidationError as e:
        errors = e.errors()  # a misspelt field is both unknown and missing: say the first
        first = next((x for x in errors if x["type"] == "extra_forbidden"), errors[0])
        raise ConfigError(f"{where}: {describe(first, model)}") from None


def check_columns(columns: Any, model: type[BaseModel], where: str) -> None:
    """A ConfigError for the first column of a CSV's header that is not a field of
    ``model``."""
    other = [str(c) for c in columns if c not in model.model_fields]
    if other:
        raise ConfigError(f"{where}: column '{other[0]}' is not one of "
                          f"{', '.join(model.model_fields)}")


def describe(err: dict[str, Any], model: type[BaseModel]) -> str:
    """One pydantic error as a phrase: ``'sms' must be >= 1 (got 0)``."""
    loc = ".".join(str(p) for p in err["loc"] if not str(p).startswith("function-"))
    what, got, ctx = err["type"], err.get("input"), err.get("ctx", {})
    field = repr(loc) if loc else "the file"
    if what == "missing":
        return f"{field} is missing"
    if what == "extra_forbidden":
        if len(err["loc"]) > 1:  # inside a nested record: no list of the top's fields
            return f"{field} is not a field of this format"
        near = difflib.get_close_matches(str(err["loc"][-1]), _names(model), n=1)
        hint = f"; did you mean '{near[0]}'?" if near else \
            f" (its fields: {', '.join(_names(model))})"
        return f"{field} is not a field of this format{hint}"
    bounds = {"greater_than": (">", "gt"), "greater_than_equal": (">=", "ge"),
              "less_than_equal": ("<=", "le"), "less_than": ("<", "lt")}
    if what in bounds:
        op, key = bounds[what]
        return f"{field} must be {op} {ctx[key]} (got {got!r})"
    if what == "finite_number":
        return f"{field} must be a finite number (got {got!r})"
    if what in ("int_type", "int_parsing", "int_from_float"):
        return f"{field} must be a whole number (got {got!r})"
    if what in ("float_type", "float_parsing"):
        return f"{field} must be a number (got {got!r})"
    if what == "literal_error":
        return f"{field} must be {ctx['expected']} (got {got!r})"
    if what in ("string_type", "bool_type", "dict_type", "list_type"):
        return f"{field} {err['msg'][0].lower()}{err['msg'][1:]} (got {got!r})"
    return f"{field}: {err['msg']} (got {got!r})"


def _names(model: type[BaseModel]) -> list[str]:
    return list(model.model_fields)


def seconds(values: Any, what: str) -> None:
    """Raise a ConfigError unless every one of ``values`` (nested lists) is a finite number
    of seconds above zero: what a stage checks before it publishes times, so that no bug
    and no input leaves a time the later stages cannot use in the store."""
    stack = [values]
    while stack:
        v = stack.pop()
        if isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                or v <= 0:
            raise ConfigError(f"{what}: a time of {v!r} s, not a finite number above zero; "
                              f"nothing was published")
