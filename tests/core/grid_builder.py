"""Build grids and snapshots for core tests in one line each."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gridroute.core import (
    AvailabilitySettings,
    Candidate,
    GridState,
    Health,
    OwnLoad,
    Sample,
    Snapshot,
)

MODEL = "m"


@dataclass
class Site:
    name: str
    running: float | None = 0.0
    waiting: float | None = 0.0
    ready: float | None = 1.0
    max_running: float | None = 100.0
    kv: float | None = None
    generation: int | None = 1
    measured: bool = True


@dataclass
class Grid:
    sites: Sequence[Site]
    settings: AvailabilitySettings = field(default_factory=AvailabilitySettings)
    own: OwnLoad = field(default_factory=OwnLoad)

    def __post_init__(self) -> None:
        cands = [
            Candidate(s.name, "p", frozenset({MODEL}), local=(i == 0))
            for i, s in enumerate(self.sites)
        ]
        self.state = GridState(cands, self.settings, models=[MODEL])

    def sample(self, site: Site, at: float) -> Sample:
        return Sample(
            site.name,
            "p",
            at,
            running=site.running,
            waiting=site.waiting,
            ready=site.ready,
            max_running=site.max_running,
            kv_usage=site.kv,
            generation=site.generation,
        )

    def refresh(
        self,
        now: float,
        sampled_at: float | None = None,
        rounds: Mapping[str, float | None] | None = None,
        health: Mapping[str, Health] | None = None,
        only: Sequence[str] | None = None,
    ) -> Snapshot:
        at = now if sampled_at is None else sampled_at
        samples = [
            self.sample(s, at)
            for s in self.sites
            if s.measured and (only is None or s.name in only)
        ]
        if rounds is None:
            rounds = {s.name: now for s in self.sites}
        return self.state.refresh(samples, rounds, now, health or {}, self.own)
