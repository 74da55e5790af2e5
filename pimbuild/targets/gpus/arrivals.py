"""When requests arrive, for the serving simulator (issue 12): Poisson at a rate, a trace
file, or all at once (offline: the largest sustainable throughput)."""

from __future__ import annotations

import csv
import random
from dataclasses import dataclass
from pathlib import Path

from pimbuild.errors import ConfigError

ARRIVALS = ("poisson", "offline", "trace")


@dataclass(frozen=True)
class Request:
    arrival_s: float
    input_tokens: int
    output_tokens: int


def poisson(rate_per_s: float, n: int, input_tokens: int, output_tokens: int,
            seed: int = 0) -> list[Request]:
    """``n`` requests with exponential gaps of mean ``1 / rate``, from a seeded generator."""
    if rate_per_s <= 0 or n < 0:
        raise ConfigError(f"a Poisson arrival rate must be > 0 (got {rate_per_s}) and the "
                          f"request count >= 0 (got {n})")
    rng, t, out = random.Random(seed), 0.0, []
    for _ in range(n):
        t += rng.expovariate(rate_per_s)
        out.append(Request(t, input_tokens, output_tokens))
    return out


def offline(n: int, input_tokens: int, output_tokens: int) -> list[Request]:
    return [Request(0.0, input_tokens, output_tokens) for _ in range(n)]


def trace(path: Path) -> list[Request]:
    """A CSV with columns ``arrival_s, input_tokens, output_tokens`` (header required)."""
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
    except OSError as e:
        raise ConfigError(f"cannot read the arrival trace {path}: {e.strerror}") from None
    need = {"arrival_s", "input_tokens", "output_tokens"}
    if not rows or not need <= set(rows[0]):
        raise ConfigError(f"the arrival trace {path} needs a header with the columns "
                          f"{', '.join(sorted(need))}")
    out = []
    for line, row in enumerate(rows, start=2):
        try:
            r = Request(float(row["arrival_s"]), int(row["input_tokens"]),
                        int(row["output_tokens"]))
        except ValueError:
            raise ConfigError(f"{path}:{line}: not a number in {dict(row)}") from None
        if r.arrival_s < 0 or r.input_tokens < 0 or r.output_tokens < 1:
            raise ConfigError(f"{path}:{line}: arrival_s and input_tokens must be >= 0 and "
                              f"output_tokens >= 1")
        out.append(r)
    return sorted(out, key=lambda r: r.arrival_s)
