"""Endpoint capacity reports: when one may lower a home's allocation (reference 4.4,
"CapacityFallback"; seed, "Tune routing capacity polling").

A home's operator answers `{servable, observedAt}`. The control plane keeps the last
`samples` answers; a home has a usable report when at least `quorum` of them are no
older than `max_age_s`. The usable figure is the lowest fresh `servable` (a report is
only ever a ceiling, so the cautious reading wins). Without one, the control-plane
allocation stands and `fallback_reason` says why ("stale", "unreachable", ...).
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
    """Fresh reports (out of the last `samples`) needed before one is trusted."""


@dataclass(frozen=True, slots=True)
class Reading:
    """What the attempts allow: `reported` (usable figure) or `fallback_reason`."""

    reported: int | None
    fallback_reason: str | None


def read(attempts: tuple[Attempt, ...], now: float, policy: ReportPolicy) -> Reading:
    """The usable report among the last attempts (newest last), or why there is none."""
    if not attempts:
        return Reading(None, "no capacity report yet")
    fresh = [
        a.report.servable
        for a in attempts
        if a.report is not None and now - a.report.observed_at <= policy.max_age_s
    ]
    if len(fresh) >= policy.quorum:
        return Reading(min(fresh), None)
    latest = attempts[-1]
    if latest.report is not None:
        age = now - latest.report.observed_at
        if age > policy.max_age_s:
            return Reading(None, f"stale: report is {age:.0f}s old (maxAge {policy.max_age_s:g}s)")
        return Reading(None, f"no quorum: {len(fresh)} of {policy.quorum} fresh report(s)")
    return Reading(None, f"unreachable: {latest.error or 'no answer'}")
