"""When requests arrive, for the serving simulator (issue 12): Poisson at a rate, a trace
file, or all at once (offline: the largest sustainable throughput)."""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass
from pathlib import Path

from pimbuild.core.errors import ConfigError
from pimbuild.core.schema import Strict, check, check_columns, number

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


def lognormal(rate_per_s: float, n: int, input_mean: float, output_mean: float,
              sigma: float, seed: int = 0, longest: int = 32768) -> list[Request]:
    """``n`` Poisson arrivals at ``rate_per_s`` whose prompt and output lengths are drawn from
    log-normal laws with these means and log-space spread ``sigma`` (0: every request the
    means), each at least 1 and at most ``longest`` tokens; from a seeded generator."""
    for name, v in (("rate", rate_per_s), ("prompt mean", input_mean),
                    ("output mean", output_mean)):
        if not (v > 0 and math.isfinite(v)):
            raise ConfigError(f"the synthetic trace's {name} must be a finite number > 0 "
                              f"(got {v})")
    if n < 1 or not (0 <= sigma <= 3):
        raise ConfigError(f"the synthetic trace needs >= 1 request (got {n}) and a spread "
                          f"from 0 to 3 (got {sigma})")
    rng, t, out = random.Random(seed), 0.0, []

    def draw(mean: float) -> int:
        x = rng.lognormvariate(math.log(mean) - sigma**2 / 2, sigma) if sigma else mean
        return max(1, min(longest, round(x)))

    for _ in range(n):
        t += rng.expovariate(rate_per_s)
        out.append(Request(t, draw(input_mean), draw(output_mean)))
    return out


def offline(n: int, input_tokens: int, output_tokens: int) -> list[Request]:
    return [Request(0.0, input_tokens, output_tokens) for _ in range(n)]


# JSON-lines keys: ours, then LLMServingSim's workloads (github casys-kaist/LLMServingSim,
# ``workloads/*.jsonl``: ``input_toks, output_toks, arrival_time_ns``)
JSON_KEYS = (("arrival_s", "input_tokens", "output_tokens", 1.0),
             ("arrival_time_ns", "input_toks", "output_toks", 1e-9))


def trace(path: Path) -> list[Request]:
    """A CSV with the columns ``arrival_s, input_tokens, output_tokens`` (header required),
    or JSON lines (``.jsonl``) with those keys or LLMServingSim's (``JSON_KEYS``)."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read the arrival trace {path}: "
                          f"{getattr(e, 'strerror', None) or e}") from None
    text_values = path.suffix != ".jsonl"
    rows = _csv(path, text) if text_values else _jsonl(path, text)
    out = []
    for line, (arrival, prompt, output) in rows:
        r = check(Row, {"arrival_s": arrival, "input_tokens": prompt, "output_tokens": output},
                  f"{path}:{line}", text=text_values)
        out.append(Request(float(r.arrival_s), r.input_tokens, r.output_tokens))
    if not out:
        raise ConfigError(f"the arrival trace {path} holds no requests")
    return sorted(out, key=lambda r: r.arrival_s)


class Row(Strict):
    """One request of a trace: when it arrives (seconds from the start), its prompt's tokens
    and the tokens it produces."""

    arrival_s: number((">=", 0))
    input_tokens: number((">=", 0), integer=True)
    output_tokens: number((">=", 1), integer=True)


def _csv(path: Path, text: str) -> list[tuple[int, tuple]]:
    import io

    rows = list(csv.DictReader(io.StringIO(text)))
    need = list(Row.model_fields)
    if not rows or not set(need) <= set(rows[0]):
        raise ConfigError(f"the arrival trace {path} needs a header with the columns "
                          f"{', '.join(need)}")
    check_columns(rows[0], Row, f"the arrival trace {path}")
    return [(line, (r["arrival_s"], r["input_tokens"], r["output_tokens"]))
            for line, r in enumerate(rows, start=2)]


def _jsonl(path: Path, text: str) -> list[tuple[int, tuple]]:
    import json

    out = []
    for line, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            r = json.loads(raw)
        except ValueError as e:
            raise ConfigError(f"{path}:{line}: not JSON ({e})") from None
        keys = next((k for k in JSON_KEYS if isinstance(r, dict) and k[0] in r), None)
        if keys is None or not all(k in r for k in keys[1:3]):
            raise ConfigError(f"{path}:{line}: needs the keys "
                              f"{' or '.join(', '.join(k[:3]) for k in JSON_KEYS)}")
        scale = keys[3]
        arrival = r[keys[0]] * scale if isinstance(r[keys[0]], (int, float)) and \
            not isinstance(r[keys[0]], bool) else r[keys[0]]
        out.append((line, (arrival, r[keys[1]], r[keys[2]])))
    return out
