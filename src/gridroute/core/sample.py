"""One provider's load at one instant: the unit every signal is made of.

The operator turns a scrape into one `Sample` per provider, relays it to peers,
and gateways build site readings from windows of them. Values follow the llm-d
EPP convention: `running` and `waiting` are *per-endpoint averages*, so the
in-flight count of an instant is `(running + waiting) * ready + held`, always
computed from fields of the same sample (never one scrape's endpoint count
times another scrape's running count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_COUNT = 1_000_000.0
"""Largest plausible count; larger or non-finite values are treated as absent."""


def plausible(value: float | None) -> float | None:
    """Clamp a raw count into the plausible range, or drop it.

    Negative values clamp to 0; NaN, infinities and values over `MAX_COUNT` become
    `None`, so one bad exporter (or one lying peer) cannot teach a huge ceiling.
    """
    if value is None:
        return None
    if not math.isfinite(value) or value > MAX_COUNT:
        return None
    return value if value > 0.0 else 0.0


def plausible_ratio(value: float | None) -> float | None:
    """A 0..1 usage ratio (KV cache): non-finite dropped, the rest clamped to [0, 1]."""
    if value is None or not math.isfinite(value):
        return None
    return min(max(value, 0.0), 1.0)


@dataclass(frozen=True, slots=True)
class Sample:
    """Load of one provider (`site/provider`) measured at `at` (seconds, reader's clock).

    `None` means the series was absent, which is different from 0: an absent queue
    series makes the site "unmeasured" for queue tiers, a 0 queue means queue-free.
    """

    site: str
    provider: str
    at: float
    running: float | None = None
    """Average running requests per ready endpoint."""
    waiting: float | None = None
    """Average queued (waiting) requests per ready endpoint."""
    ready: float | None = None
    """Ready endpoints; < 1 means unready."""
    held: float | None = None
    """Requests held before scheduling by flow control (sum over partitions)."""
    deepest_queue: float | None = None
    """The longest single endpoint queue (max over endpoints)."""
    kv_usage: float | None = None
    """KV-cache usage ratio 0..1 (worst endpoint or pool average)."""
    max_running: float | None = None
    """Configured maxRunning per endpoint; capacity = max_running * ready."""
    generation: int | None = None
    """Provider config generation that scopes ceiling learning; None disables learning."""

    @property
    def key(self) -> str:
        return f"{self.site}/{self.provider}"

    def sanitized(self) -> Sample:
        """The same sample with every count made plausible (see `plausible`)."""
        return Sample(
            site=self.site,
            provider=self.provider,
            at=self.at,
            running=plausible(self.running),
            waiting=plausible(self.waiting),
            ready=plausible(self.ready),
            held=plausible(self.held),
            deepest_queue=plausible(self.deepest_queue),
            kv_usage=plausible_ratio(self.kv_usage),
            max_running=plausible(self.max_running),
            generation=self.generation,
        )

    @property
    def endpoints(self) -> float:
        """Ready endpoints, 1 when the series is absent (a single server)."""
        return 1.0 if self.ready is None else self.ready

    @property
    def in_flight(self) -> float | None:
        """(running + waiting) per endpoint x ready endpoints + held, or None without running."""
        if self.running is None:
            return None
        per_endpoint = self.running + (self.waiting or 0.0)
        return per_endpoint * self.endpoints + (self.held or 0.0)

    @property
    def running_total(self) -> float | None:
        return None if self.running is None else self.running * self.endpoints

    @property
    def capacity(self) -> float | None:
        """maxRunning x ready endpoints when maxRunning is known."""
        if self.max_running is None:
            return None
        return self.max_running * self.endpoints

    def backlog(self, queue_full: float) -> bool:
        """Whole requests are waiting somewhere: queue at/over `queue_full` or anything held."""
        return (self.waiting is not None and self.waiting >= queue_full) or (
            self.held is not None and self.held >= 1.0
        )

    def queue_free(self) -> bool:
        """Nothing waiting anywhere (the condition under which a sample may teach a ceiling)."""
        return (
            (self.waiting is None or self.waiting < 1.0)
            and (self.deepest_queue is None or self.deepest_queue < 1.0)
            and (self.held is None or self.held < 1.0)
        )
