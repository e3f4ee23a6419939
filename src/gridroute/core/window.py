"""Look-back windows: from per-instant samples to one site reading.

"Worst in window, not latest" is deliberate: a transient 0 must not make a loaded
site look idle. Every combined value is computed inside one sample (one instant)
before the worst is taken across instants.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from gridroute.core.sample import Sample


@dataclass(frozen=True, slots=True)
class Reading:
    """What one candidate's recent samples say, as of its newest sample."""

    key: str
    sampled_at: float
    """Time of the newest sample."""
    in_flight: float | None
    """Worst per-instant in-flight in the look-back window; None without running series."""
    latest_in_flight: float | None
    """In-flight of the newest sample that carries load (for the gateway's own-count
    correction); None when no sample in the window does (the load is unknown)."""
    loaded_at: float | None
    """Time of that sample: a readiness-only sample (a failed scrape) never moves it."""
    queued: float | None
    """Worst per-endpoint queue in the window; None when the site publishes no queue."""
    held: float | None
    deepest_queue: float | None
    congested_in_flight: float | None
    """Worst in-flight over instants with a backlog; None if no instant had one."""
    congested_running: float | None
    """Least running total over instants with a backlog: the demonstrated limit."""
    kv_usage: float | None
    """Worst KV-cache usage in the window."""
    latest_kv_usage: float | None
    """KV-cache usage of the newest sample that carries load (paired with
    `latest_in_flight`)."""
    capacity: float | None
    """Newest maxRunning x ready endpoints, when maxRunning is known."""
    generation: int | None
    """Generation of the newest sample that carries load (readiness-only samples have none,
    and must not switch learning off)."""
    unready: bool
    """The newest sample's ready endpoints is < 1."""


def _worst(values: Iterable[float | None]) -> float | None:
    best: float | None = None
    for v in values:
        if v is not None and (best is None or v > best):
            best = v
    return best


class SampleWindow:
    """Samples of one candidate, newest last, pruned to the look-back window.

    Samples with an `at` not newer than the newest are ignored (a relayed duplicate
    or an out-of-order row must not count twice in the smoothing).
    """

    __slots__ = ("_samples", "key")

    def __init__(self, key: str) -> None:
        self.key = key
        self._samples: deque[Sample] = deque()

    def add(self, sample: Sample) -> bool:
        """Append a sanitized sample; False when it is not newer than what we have."""
        if self._samples and sample.at <= self._samples[-1].at:
            return False
        self._samples.append(sample.sanitized())
        return True

    @property
    def newest(self) -> Sample | None:
        return self._samples[-1] if self._samples else None

    def prune(self, lookback_s: float) -> None:
        """Drop samples older than `lookback_s` behind the newest (the newest always stays)."""
        if not self._samples:
            return
        horizon = self._samples[-1].at - lookback_s
        while len(self._samples) > 1 and self._samples[0].at < horizon:
            self._samples.popleft()

    def reading(self, queue_full: float, since: float | None = None) -> Reading | None:
        """The reading over samples at or after `since` (default: the whole window)."""
        if not self._samples:
            return None
        newest = self._samples[-1]
        window = [s for s in self._samples if since is None or s.at >= since] or [newest]
        congested = [s for s in window if s.backlog(queue_full)]
        congested_running = [r for s in congested if (r := s.running_total) is not None]
        loaded = next((s for s in reversed(window) if s.in_flight is not None), None)
        return Reading(
            key=self.key,
            sampled_at=newest.at,
            in_flight=_worst(s.in_flight for s in window),
            latest_in_flight=None if loaded is None else loaded.in_flight,
            loaded_at=None if loaded is None else loaded.at,
            queued=_worst(s.waiting for s in window),
            held=_worst(s.held for s in window),
            deepest_queue=_worst(s.deepest_queue for s in window),
            congested_in_flight=_worst(s.in_flight for s in congested),
            congested_running=min(congested_running) if congested_running else None,
            kv_usage=_worst(s.kv_usage for s in window),
            latest_kv_usage=None if loaded is None else loaded.kv_usage,
            capacity=newest.capacity,
            generation=newest.generation if loaded is None else loaded.generation,
            unready=newest.ready is not None and newest.ready < 1.0,
        )
