"""Bounds on the capacity a site may claim: a peer's word is not taken without limit.

A sample's capacity is `max_running x ready`, both as the site reports them. One that
claims 999,999 x 999,999 would draw traffic away from every honest site, so before a
read is folded in, each sample's claim is clamped to the lower of:

* the candidate's `sites[].max_capacity` (an operator who knows the site's hardware),
* `limits.claimed_capacity_factor` x the candidate's learned soft ceiling (the most it
  was seen to hold with nothing waiting; at least `ceiling_floor`), when set.

A clamped sample keeps its readiness and load; only `max_running` is lowered so that
`max_running x ready` equals the bound. Each clamp is counted per candidate
(`grid_route_capacity_clamped_total{site,cluster}`, labels from the config).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter

from gridroute.core import Sample


@dataclass(frozen=True, slots=True)
class ClaimBounds:
    """The configured bounds: per candidate key, and the factor over learned soft."""

    max_capacity: Mapping[str, float]
    factor: float | None
    floor: float

    def limit(self, key: str, soft: float | None) -> float | None:
        """The most `key` may claim now, or None when nothing bounds it."""
        bound = self.max_capacity.get(key)
        if self.factor is not None:
            learned = self.factor * max(soft or 0.0, self.floor)
            bound = learned if bound is None else min(bound, learned)
        return bound


def clamp(sample: Sample, limit: float | None) -> Sample | None:
    """The sample with its capacity lowered to `limit`, or None when within it."""
    capacity = sample.capacity
    if limit is None or capacity is None or capacity <= limit:
        return None
    return dataclasses.replace(sample, max_running=limit / sample.endpoints)


class ClaimClamp:
    """Applies `ClaimBounds` to each read; counts what it clamped."""

    def __init__(
        self,
        bounds: ClaimBounds,
        learned_soft: Callable[[str], float | None],
        registry: CollectorRegistry | None,
    ) -> None:
        self.bounds = bounds
        self._soft = learned_soft
        self.clamped = Counter(
            "grid_route_capacity_clamped",
            "Samples whose claimed capacity (maxRunning x ready) was clamped to the "
            "configured bound before routing read them.",
            ["site", "cluster"],
            registry=registry,
        )

    def __call__(self, samples: Iterable[Sample]) -> list[Sample]:
        out: list[Sample] = []
        for s in samples:
            key = s.key
            fixed = clamp(s, self.bounds.limit(key, self._soft(key)))
            if fixed is None:
                out.append(s)
            else:
                self.clamped.labels(s.site, s.provider).inc()
                out.append(fixed)
        return out
