"""The gateway's live view of the grid: the current snapshot and its own load.

One `LiveGrid` per worker process. Its owner (the signals loop, the health prober,
a reload) calls `refresh`, which folds new samples into the core's `GridState` and
swaps `snapshot` by reference; requests read `snapshot` once and keep it. `own`
counts this gateway's in-flight per candidate, and `changes` wakes requests held in
the admission queue when a request ends or a new snapshot arrives.

Time is the wall clock (`time.time`) because the poller re-bases every sample onto
the reader's wall clock; own-load change points must be on the same clock as the
samples they correct.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from random import Random

from gridroute.core import AvailabilitySettings, GridState, Health, OwnLoad, Sample, Snapshot
from gridroute.gateway.routing import Routing


class Changes:
    """Wakes every waiter at once; costs nothing while nobody waits.

    Why not `asyncio.Condition`: `wake` runs on every request end, and a condition
    needs its lock held; a single lazily made future is a pointer check when idle.
    """

    __slots__ = ("_fut",)

    def __init__(self) -> None:
        self._fut: asyncio.Future[None] | None = None

    def wake(self) -> None:
        fut = self._fut
        if fut is not None:
            self._fut = None
            if not fut.done():
                fut.set_result(None)

    async def wait(self, timeout: float) -> None:
        """Return after the next `wake` or after `timeout` seconds, whichever is first."""
        if self._fut is None:
            self._fut = asyncio.get_running_loop().create_future()
        fut = self._fut
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(fut), timeout)


class LiveGrid:
    """Snapshot holder, own-load counter and health table of one gateway worker."""

    def __init__(
        self,
        routing: Routing,
        settings: AvailabilitySettings,
        rng: Random | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.routing = routing
        self.clock = clock
        self.rng = rng or Random()
        self.own = OwnLoad()
        self.changes = Changes()
        self.state = GridState(routing.candidates, settings, routing.models)
        self.health: dict[str, Health] = {}
        self._rounds: dict[str, float | None] = {}
        self.polls = 0
        """Operator reads folded in so far (readiness needs one)."""
        self.snapshot: Snapshot = self.state.refresh((), {}, clock(), self.health, self.own)

    def refresh(
        self, samples: Iterable[Sample], rounds: Mapping[str, float | None], now: float
    ) -> Snapshot:
        """Fold one operator read in and publish the new snapshot."""
        self._rounds = dict(rounds)
        self.polls += 1
        return self._publish(self.state.refresh(samples, rounds, now, self.health, self.own))

    def set_health(self, health: Mapping[str, Health]) -> None:
        """Adopt new probe verdicts now, rather than at the next poll (demotion is urgent)."""
        if dict(health) == self.health:
            return
        self.health = dict(health)
        self._publish(self.state.refresh((), self._rounds, self.clock(), self.health, self.own))

    def reconfigure(self, routing: Routing, settings: AvailabilitySettings) -> None:
        """Adopt a reloaded config; learning about candidates that stay is kept."""
        self.routing = routing
        self.state.reconfigure(routing.candidates, settings, routing.models)
        keys = {c.key for c in routing.candidates}
        self.health = {k: h for k, h in self.health.items() if k in keys}
        self._publish(self.state.refresh((), self._rounds, self.clock(), self.health, self.own))

    def _publish(self, snapshot: Snapshot) -> Snapshot:
        self.snapshot = snapshot
        self.changes.wake()
        return snapshot
