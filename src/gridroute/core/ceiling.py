"""Learned ceilings and rho: how much a site can really hold, and how full it is.

Two bounds are learned from what a site was seen to do, never declared:

* **soft**: the most in-flight the site held with nothing waiting anywhere. A queued
  sample never raises it (it only proves the site was *at* a limit, not above it).
  Once load falls it decays by half every `ceiling_half_life_ms`.
* **hard**: the least running total the site held at a demonstrated limit (an instant
  with work waiting). It relaxes (doubles) per half-life without fresh evidence and is
  forgotten when a queue-free sample holds more than it.

The **effective ceiling** that rho is read against is the declared capacity
(maxRunning x ready) when known, raised to soft when the site demonstrably held more
with nothing waiting, else soft alone; never above hard; never below
`ceiling_floor`. The public reference keeps one learned ceiling (max of decayed,
taught, floor); that is soft here, and hard adds the limit the seed text names.

Learning is scoped to the provider's config generation: a new generation starts
over, and a provider without a generation does not learn at all (its ceiling is
capacity or the floor), while its fresh pressure stays usable.

rho = in-flight / ceiling, smoothed once per new sample (EWMA, `smoothing`), combined
with KV-cache pressure as max(rho, kv_usage / kv_full). Taking the larger is llm-d's
per-endpoint rule (max(queue/5, kv/0.8)) lifted to the site: either resource running
out saturates the site, and neither can hide the other.

For gridroute's per-request estimates the same rule is written as a ceiling: at the
sample, KV fills to `kv_full` at `in_flight * kv_full / kv_usage` requests
(`kv_bounded`), and max(x / ceiling, kv / kv_full) == x / min(ceiling, that) for the
sample's own in-flight. Read that way, KV pressure moves with the gateway's own counts
between polls instead of standing still for a poll, which made every gateway rank sites
on the same poll-old KV value and herd.
"""

from __future__ import annotations

from dataclasses import dataclass

from gridroute.core.sample import Sample
from gridroute.core.settings import AvailabilitySettings
from gridroute.core.window import Reading

RHO_MAX = 16.0
"""rho above 1 means work is queued past the ceiling; cap it so one wild sample is bounded."""


@dataclass(frozen=True, slots=True)
class CeilingState:
    """What has been learned about one candidate, as of `at` (seconds)."""

    at: float
    generation: int | None
    soft: float | None
    hard: float | None
    rho: float | None
    """Smoothed rho of the site's own samples (the reported rho)."""
    sampled_at: float | None
    """Newest sample folded in; a refresh with no newer sample changes nothing."""

    @staticmethod
    def empty(at: float) -> CeilingState:
        return CeilingState(at=at, generation=None, soft=None, hard=None, rho=None, sampled_at=None)


def decay(value: float, dt_s: float, half_life_s: float) -> float:
    """Halve `value` once per half-life over `dt_s`."""
    factor: float = 0.5 ** (max(dt_s, 0.0) / half_life_s)
    return value * factor


def effective_ceiling(
    soft: float | None, hard: float | None, capacity: float | None, floor: float
) -> float:
    """Capacity (raised to soft) or soft; never above hard; never below the floor, nor
    the floor above a declared capacity.

    The floor keeps a site whose ceiling is still being learned (or was learned low)
    taking requests; a site that declares fewer slots than the floor has that many, and
    lifted to the floor it read as free room that was not there (measured in generated
    worlds: a 7-slot site with 5 held from outside overshot 31 times in 1,533 requests,
    against 4 with the floor bounded)."""
    upper = capacity if capacity is not None else soft
    if capacity is not None and soft is not None and soft > capacity:
        upper = soft
    if upper is None:
        upper = floor
    if hard is not None and hard < upper:
        upper = hard
    if capacity is not None and 0 < capacity < floor:
        floor = capacity
    return max(upper, floor)


def teach(state: CeilingState, sample: Sample, settings: AvailabilitySettings) -> CeilingState:
    """Fold one new sample into the learned bounds (not the rho)."""
    half_life_s = settings.ceiling_half_life_ms / 1000.0
    if sample.generation is None:
        return CeilingState(sample.at, None, None, None, state.rho, state.sampled_at)
    soft, hard = state.soft, state.hard
    if sample.generation != state.generation:
        soft, hard = None, None
    dt = sample.at - state.at
    if soft is not None:
        # Decays freely: the floor is applied once, in `effective_ceiling`. Clamped
        # here, a soft ceiling at the floor could not tell "held that many" from
        # "decayed to the floor", and a declared capacity below the floor needs to.
        soft = decay(soft, dt, half_life_s)
    if hard is not None:
        hard = hard * 2.0 ** (max(dt, 0.0) / half_life_s)
    in_flight = sample.in_flight
    if in_flight is not None and sample.queue_free():
        soft = in_flight if soft is None else max(soft, in_flight)
        if hard is not None and in_flight > hard:
            hard = None
    elif sample.backlog(settings.queue_full):
        running = sample.running_total
        if running is not None and running >= settings.ceiling_floor:
            hard = running if hard is None else min(hard, running)
    return CeilingState(sample.at, sample.generation, soft, hard, state.rho, state.sampled_at)


def kv_bounded(ceiling: float, in_flight: float, kv_usage: float | None, kv_full: float) -> float:
    """The ceiling lowered to the in-flight at which KV usage would reach `kv_full`,
    extrapolated from one sample (requests in flight and KV used, same instant)."""
    if kv_usage is None or kv_usage <= 0.0 or in_flight <= 0.0:
        return ceiling
    return max(min(ceiling, in_flight * kv_full / kv_usage), 1.0)


def rho_of(
    in_flight: float | None, ceiling: float, kv_usage: float | None, kv_full: float
) -> float | None:
    """Raw pressure of one reading: in-flight over the ceiling, or KV pressure if larger."""
    if in_flight is None:
        return None
    raw = in_flight / ceiling
    if kv_usage is not None:
        raw = max(raw, kv_usage / kv_full)
    return min(max(raw, 0.0), RHO_MAX)


def smooth(
    state: CeilingState,
    reading: Reading,
    new_samples: int,
    ceiling: float,
    settings: AvailabilitySettings,
) -> CeilingState:
    """Move the reported rho toward the reading's raw rho once per new sample."""
    raw = rho_of(reading.in_flight, ceiling, reading.kv_usage, settings.kv_full)
    if raw is None:
        rho = None
    elif state.rho is None:
        rho = raw
    else:
        rho = state.rho
        a = settings.smoothing
        for _ in range(max(new_samples, 1)):
            rho = rho * (1.0 - a) + raw * a
    return CeilingState(state.at, state.generation, state.soft, state.hard, rho, reading.sampled_at)
