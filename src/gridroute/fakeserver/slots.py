"""FIFO admission to a fixed number of slots, the way a model server batches requests.

A vLLM engine runs at most N sequences at once and queues the rest in arrival order;
the gauges `num_requests_running` / `num_requests_waiting` read straight off this pool.
The pool can be resized live (capacity changes in the demo) and is cancellation-safe:
a waiter whose task is cancelled (its client went away) leaves the queue at once, and a
slot granted to a task that is cancelled before it resumes is handed on, never leaked.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class QueueFull(Exception):
    """Every slot is busy and the queue is at its bound: the caller should shed (429)."""


class SlotPool:
    """`slots` concurrent holders, then a FIFO queue of at most `max_queue` waiters."""

    __slots__ = ("_external", "_max_queue", "_running", "_slots", "_waiters")

    def __init__(self, slots: int, max_queue: int | None = None) -> None:
        self._slots = slots
        self._max_queue = max_queue
        self._running = 0
        self._external = 0
        """Slots held by load from outside (`/admin/external`): it runs first, and what
        does not fit waits, as another client's requests would."""
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def slots(self) -> int:
        return self._slots

    @property
    def running(self) -> int:
        """Requests in execution, external ones included (never above the slots)."""
        return min(self._running + self._external, max(self._slots, self._running))

    @property
    def waiting(self) -> int:
        """Requests queued, external ones that found no slot included."""
        return len(self._waiters) + max(self._running + self._external - self._slots, 0)

    @property
    def external(self) -> int:
        return self._external

    @property
    def full(self) -> bool:
        """True when an arrival now would have to wait (or be shed)."""
        return self._running + self._external >= self._slots or bool(self._waiters)

    async def acquire(self) -> None:
        """Take a slot, waiting in arrival order; raises `QueueFull` instead of queueing
        past `max_queue`. Pair every successful return with one `release()`."""
        if self._running + self._external < self._slots and not self._waiters:
            self._running += 1
            return
        if self._max_queue is not None and len(self._waiters) >= self._max_queue:
            raise QueueFull
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                # Granted, but cancelled before it resumed: pass the slot on.
                self.release()
            else:
                with contextlib.suppress(ValueError):  # _grant may have dropped it already
                    self._waiters.remove(fut)
            raise

    def release(self) -> None:
        """Give a slot back and admit the head of the queue if there is room."""
        self._running -= 1
        self._grant()

    def resize(self, slots: int) -> None:
        """Change capacity now. Growing admits waiters at once; shrinking lets running
        requests finish and admits nobody until running drops below the new size."""
        self._slots = slots
        self._grant()

    def set_external(self, in_flight: int) -> None:
        """Hold `in_flight` slots for load from outside; lowering it admits waiters."""
        self._external = in_flight
        self._grant()

    def _grant(self) -> None:
        while self._running + self._external < self._slots and self._waiters:
            fut = self._waiters.popleft()
            if fut.done():  # its task was cancelled; it removes nothing further
                continue
            fut.set_result(None)
            self._running += 1
