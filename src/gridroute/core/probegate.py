"""The routing health-probe gate: hysteresis over probe verdicts (seed, "Configure routing
health probes"; reference 4.3).

A home is gated only once `consecutive_failures` reaches the failure threshold, so one
dropped packet does not move a large traffic share; it re-opens after `success_threshold`
consecutive passes. `Unknown` (the probe could not run, or reached no verdict) never
gates and never re-opens: it leaves the gate where it was, because a fault of the prober
is uniform across the fleet and would otherwise zero every home at once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum


class ProbeResult(Enum):
    PASSING = "Passing"
    FAILING = "Failing"
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class ProbeThresholds:
    failure_threshold: int = 3
    """Consecutive Failing verdicts that close the gate."""
    success_threshold: int = 1
    """Consecutive Passing verdicts that re-open a closed gate."""


@dataclass(frozen=True, slots=True)
class ProbeState:
    """What the probe has seen of one home; `gated` is the decision the weight reads."""

    result: ProbeResult = ProbeResult.UNKNOWN
    gated: bool = False
    consecutive_failures: int = 0
    consecutive_passes: int = 0
    last_probe_at: float | None = None
    message: str = "not probed yet"


def step(
    prior: ProbeState | None,
    result: ProbeResult,
    at: float,
    message: str,
    thresholds: ProbeThresholds,
) -> ProbeState:
    """Fold one probe verdict (taken at `at`) into the gate."""
    state = prior or ProbeState()
    if result is ProbeResult.UNKNOWN:
        return replace(state, result=result, last_probe_at=at, message=message)
    if result is ProbeResult.FAILING:
        failures = state.consecutive_failures + 1
        gated = state.gated or failures >= thresholds.failure_threshold
        return ProbeState(result, gated, failures, 0, at, message)
    passes = state.consecutive_passes + 1
    gated = state.gated and passes < thresholds.success_threshold
    return ProbeState(result, gated, 0, passes, at, message)
