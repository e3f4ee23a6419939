"""Service times drawn from a seeded distribution, so a fake fleet behaves like a queue.

A router's behaviour past capacity depends on how service times scatter (a constant
service time hides queueing effects that an exponential or lognormal tail exposes), so
the distribution is a setting, and the random source is seeded so runs can be replayed.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from gridroute.fakeserver.settings import Distribution


@dataclass(frozen=True, slots=True)
class Timing:
    """When one request's tokens appear, relative to the moment it got its slot."""

    first_token_s: float
    """Seconds from slot to first token (the whole service time when tokens come at once)."""
    per_token_s: float
    """Seconds between consecutive tokens; 0 means all tokens come together."""

    def total_s(self, tokens: int) -> float:
        """Seconds the request holds its slot when it produces `tokens` tokens."""
        return self.first_token_s + self.per_token_s * max(tokens - 1, 0)


class ServiceTime:
    """Draws `Timing`s with mean `mean_s` from one distribution and one random source."""

    __slots__ = ("_dist", "_mean_s", "_mu", "_per_token_s", "_rng", "_sigma")

    def __init__(
        self,
        mean_s: float,
        distribution: Distribution = "constant",
        *,
        sigma: float = 0.5,
        per_token_s: float | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self._mean_s = mean_s
        self._dist = distribution
        self._sigma = sigma
        # Lognormal with mean `mean_s`: E[X] = exp(mu + sigma^2 / 2).
        self._mu = math.log(mean_s) - sigma * sigma / 2 if mean_s > 0 else 0.0
        self._per_token_s = per_token_s or 0.0
        self._rng = rng or random.Random(0)

    def sample_s(self) -> float:
        """One service time in seconds."""
        if self._mean_s <= 0 or self._dist == "constant":
            return self._mean_s
        if self._dist == "exponential":
            return self._rng.expovariate(1.0 / self._mean_s)
        return self._rng.lognormvariate(self._mu, self._sigma)

    def sample(self) -> Timing:
        """One request's timing: sampled first-token time, fixed per-token pace."""
        return Timing(self.sample_s(), self._per_token_s)
