"""How a step's tokens fall on a mixture-of-experts layer's experts: the tokens each expert
computes, under a routing pattern (``--routing``). Routing depends on the data, so each
pattern is its own DDG and its own placement, as FluidGPU plans a graph per pattern.

- ``balanced``: every expert gets ``T k / E`` of the ``T k`` token-expert pairs (the
  remainder to the first experts), as a router trained with a load-balancing loss tends to.
- ``zipf:S``: expert ``e``'s share falls as ``1 / (e + 1) ** S`` (``S`` >= 0; 0 is balanced),
  no expert receiving more than the ``T`` tokens, the pairs apportioned by largest remainder.
- ``router:SEED``: a seeded router: each expert has a fixed bias, each token its own noise
  (both standard normal), and each token goes to its ``k`` highest; the first ``T`` tokens
  of the seeded stream are a step of ``T``.

Every expert sees the same tokens in every layer (a simplification: real routers differ by
layer)."""

from __future__ import annotations

import math
import random

from pimbuild.core.errors import ConfigError

PATTERNS = ("balanced", "zipf:S", "router:SEED")


class Routing:
    """Tokens per expert of ``experts`` experts, ``top_k`` per token, under ``pattern``."""

    def __init__(self, pattern: str, experts: int, top_k: int) -> None:
        self.pattern, self.experts, self.top_k = pattern, experts, top_k
        kind, _, arg = pattern.partition(":")
        self.kind = kind
        try:
            if kind == "balanced" and not arg:
                self.weights = [1.0] * experts
            elif kind == "zipf" and arg:
                s = float(arg)
                if not math.isfinite(s) or s < 0:
                    raise ValueError
                self.weights = [1 / (e + 1) ** s for e in range(experts)]
            elif kind == "router" and arg:
                rng = random.Random(int(arg))
                self.bias = [rng.gauss(0, 1) for _ in range(experts)]
                self.rng, self.prefix = rng, [[0] * experts]
            else:
                raise ValueError
        except ValueError:
            raise ConfigError(f"unknown routing pattern '{pattern}' (patterns: "
                              f"{', '.join(PATTERNS)})") from None
        self.memo: dict[int, tuple[int, ...]] = {}

    def counts(self, tokens: int) -> tuple[int, ...]:
        """Tokens each expert computes in a step of ``tokens`` (they sum to tokens x k)."""
        out = self.memo.get(tokens)
        if out is None:
            out = self.memo[tokens] = tuple(
                self._seeded(tokens) if self.kind == "router" else self._shares(tokens))
        return out

    def _shares(self, tokens: int) -> list[int]:
        """``tokens x k`` pairs in proportion to the weights, at most ``tokens`` an expert
        (what a capped expert cannot take goes to the others, in proportion)."""
        pairs, cap = tokens * self.top_k, tokens
        counts = [0] * self.experts
        open_ = list(range(self.experts))
        while pairs and open_:
            total = sum(self.weights[e] for e in open_)
            want = {e: pairs * self.weights[e] / total for e in open_}
            full = [e for e in open_ if counts[e] + want[e] >= cap]
            if full:  # these take what is left to their cap; the rest share the remainder
                for e in full:
                    pairs -= cap - counts[e]
                    counts[e] = cap
                open_ = [e for e in open_ if e not in full]
                continue
            floor = {e: math.floor(want[e]) for e in open_}
            rest = pairs - sum(floor.values())
            for e in sorted(open_, key=lambda e: (floor[e] - want[e], e))[:rest]:
                floor[e] += 1
            for e in open_:
                counts[e] += floor[e]
            pairs = 0
        return counts

    def _seeded(self, tokens: int) -> list[int]:
        while len(self.prefix) <= tokens:
            noise = [b + self.rng.gauss(0, 1) for b in self.bias]
            chosen = sorted(range(self.experts), key=lambda e: -noise[e])[:self.top_k]
            row = list(self.prefix[-1])
            for e in chosen:
                row[e] += 1
            self.prefix.append(row)
        return self.prefix[tokens]
