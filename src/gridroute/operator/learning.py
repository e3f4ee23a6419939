"""Ceilings and rho of this site's own providers, for `/status`, through the core.

The operator shows what the selection core would conclude from its own samples:
soft, hard and effective ceiling, and rho. Nothing here decides anything; the
gateway learns its own copy from the relayed samples (learned state lives only in
the process that uses it).
"""

from __future__ import annotations

from dataclasses import dataclass

from gridroute.core import ceiling
from gridroute.core.sample import Sample
from gridroute.core.settings import AvailabilitySettings
from gridroute.core.window import SampleWindow


@dataclass(frozen=True, slots=True)
class Learned:
    soft: float | None
    hard: float | None
    effective: float
    rho: float | None


class ProviderLearning:
    """One provider's window and learned bounds, fed every new sample."""

    def __init__(self, key: str, settings: AvailabilitySettings | None = None) -> None:
        self.settings = settings or AvailabilitySettings()
        self.window = SampleWindow(key)
        self.state: ceiling.CeilingState | None = None
        self.learned: Learned | None = None

    def add(self, sample: Sample) -> Learned | None:
        s = self.settings
        if not self.window.add(sample):
            return self.learned
        self.window.prune(s.lookback_ms / 1000.0)
        state = self.state or ceiling.CeilingState.empty(sample.at)
        state = ceiling.teach(state, sample.sanitized(), s)
        reading = self.window.reading(s.queue_full)
        if reading is None:
            return self.learned
        effective = ceiling.effective_ceiling(
            state.soft, state.hard, reading.capacity, s.ceiling_floor
        )
        state = ceiling.smooth(state, reading, 1, effective, s)
        self.state = state
        self.learned = Learned(state.soft, state.hard, effective, state.rho)
        return self.learned
