"""One served model inside the fake server: its slots, queue and counters.

Everything `/metrics` and `/admin/stats` report about a model lives here as plain
attributes that the request path bumps; readers compute gauges from them on demand.
"""

from __future__ import annotations

from typing import Any

from gridroute.fakeserver.metrics import E2E_BOUNDS_S, FINISHED_REASONS, TTFT_BOUNDS_S, Buckets
from gridroute.fakeserver.slots import SlotPool


class FakeEngine:
    """The state of one model's engine: capacity, queue, and what happened so far."""

    __slots__ = (
        "cancelled",
        "e2e",
        "finished",
        "generation_tokens",
        "model",
        "overshoot",
        "pool",
        "prompt_tokens",
        "rejected",
        "served",
        "ttft",
    )

    def __init__(self, model: str, slots: int, max_queue: int | None) -> None:
        self.model = model
        self.pool = SlotPool(slots, max_queue)
        self.served = 0
        """Requests answered in full."""
        self.cancelled = 0
        """Requests whose client went away while queued, running or streaming."""
        self.overshoot = 0
        """Arrivals that found every slot busy (queued or shed)."""
        self.rejected = 0
        """Arrivals shed with 429 because the queue was at `max_queue`."""
        self.finished = dict.fromkeys(FINISHED_REASONS, 0)
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.ttft = Buckets(TTFT_BOUNDS_S)
        self.e2e = Buckets(E2E_BOUNDS_S)

    def record_done(
        self, reason: str, prompt_tokens: int, tokens: int, ttft_s: float, e2e_s: float
    ) -> None:
        """Count one request answered in full."""
        self.served += 1
        self.finished[reason] += 1
        self.prompt_tokens += prompt_tokens
        self.generation_tokens += tokens
        self.ttft.observe(ttft_s)
        self.e2e.observe(e2e_s)

    def record_cancelled(self) -> None:
        """Count one request abandoned by its client (vLLM's `abort`)."""
        self.cancelled += 1
        self.finished["abort"] += 1

    def stats(self) -> dict[str, Any]:
        """This engine's part of `/admin/stats`."""
        return {
            "slots": self.pool.slots,
            "running": self.pool.running,
            "waiting": self.pool.waiting,
            "served": self.served,
            "cancelled": self.cancelled,
            "overshoot": self.overshoot,
            "rejected": self.rejected,
        }
