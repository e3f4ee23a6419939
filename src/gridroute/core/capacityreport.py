"""Endpoint capacity reports: when one may lower a home's allocation (reference 4.4,
"CapacityFallback"; seed, "Tune routing capacity polling").

A home's operator answers `{servable, observedAt}`. The control plane keeps the last
`samples` answers; a home has a usable report when at least `quorum` of them are
younger than `max_age_s` (a report exactly `max_age_s` old is stale, as in OME). The
usable figure is the `quorum`-th lowest fresh `servable` (OME's rule): a low reading
lowers the allocation only once `quorum` readings are at or below it, so one broken or
lying reporter behind the home's address cannot zero the cluster on its own, while a
corroborated low still wins over any higher reading. A failed poll releases the window:
only the reports after the last failure count (fail open means the ceiling goes, and
old lows must not come back with the next success). Without a usable report, the
control-plane allocation stands and `fallback_reason` says why ("stale", "unreachable",
...).

Each (home's provider, effective policy) pair is its own window with its own cadence
(`due`, `kept`): a service with its own `routing.capacity` never shares reports with
one on the global policy, nor its poll times.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CapacityReport:
    servable: int
    observed_at: float


@dataclass(frozen=True, slots=True)
class Attempt:
    """One capacity poll: a report, or why there was none (`error`)."""

    report: CapacityReport | None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class ReportPolicy:
    max_age_s: float = 30.0
    quorum: int = 1
    """Fresh reports (out of the last `samples`) needed before one is trusted; the
    usable figure is the quorum-th lowest of them."""


@dataclass(frozen=True, slots=True)
class Reading:
    """What the attempts allow: `reported` (usable figure) or `fallback_reason`."""

    reported: int | None
    fallback_reason: str | None


def read(attempts: tuple[Attempt, ...], now: float, policy: ReportPolicy) -> Reading:
    """The usable report among the last attempts (newest last), or why there is none."""
    if not attempts:
        return Reading(None, "no capacity report yet")
    failures = [i for i, a in enumerate(attempts) if a.report is None]
    window = attempts[failures[-1] + 1 :] if failures else attempts
    fresh = sorted(
        a.report.servable
        for a in window
        if a.report is not None and now - a.report.observed_at < policy.max_age_s
    )
    quorum = max(policy.quorum, 1)
    if len(fresh) >= quorum:
        return Reading(fresh[quorum - 1], None)
    latest = attempts[-1]
    if latest.report is not None:
        age = now - latest.report.observed_at
        if age >= policy.max_age_s:
            return Reading(None, f"stale: report is {age:.0f}s old (maxAge {policy.max_age_s:g}s)")
        since = " since the last failed poll" if failures else ""
        return Reading(None, f"no quorum: {len(fresh)} of {quorum} fresh report(s){since}")
    return Reading(None, f"unreachable: {latest.error or 'no answer'}")


def due(last_polled_at: float | None, now: float, period_s: float) -> bool:
    """Whether a window last polled at `last_polled_at` (None: never) is polled now."""
    return last_polled_at is None or now - last_polled_at >= period_s


def kept(window: tuple[Attempt, ...], attempt: Attempt, samples: int) -> tuple[Attempt, ...]:
    """The window after `attempt`: the last `samples` attempts, newest last."""
    return (*window, attempt)[-max(samples, 1) :]
