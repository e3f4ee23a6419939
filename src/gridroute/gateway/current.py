"""The gateway's live view of the grid: the current snapshot and its own load.

One `CurrentGrid` per worker process. Its owner (the signals loop, the health prober,
a reload) calls `refresh`, which folds new samples into the core's `GridState` and
swaps `snapshot` by reference; requests read `snapshot` once and keep it. `own`
counts this gateway's in-flight per candidate, and `changes` wakes requests held in
the admission queue when a request ends or a new snapshot arrives.

Two clocks. `clock` is the wall clock (`gridroute.clock.wall`: a host clock set back
does not move it) because the poller re-bases every sample onto the reader's wall
clock; snapshot times and own-load change points must be on the same clock as the
samples they correct.
`monotonic` (`time.monotonic`) times everything that is a span rather than a point in
the samples' time: admission-queue deadlines, request durations, affinity idle times,
the decision history's window.
A wall clock stepped by NTP or by hand would otherwise end a hold at once or stretch it
by the size of the step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from random import Random

from gridroute.clock import wall
from gridroute.core import (
    AffinityTable,
    AvailabilitySettings,
    GridState,
    Health,
    OwnLoad,
    Policy,
    Sample,
    SiteView,
    Snapshot,
)
from gridroute.core.ejection import Ejections
from gridroute.core.fairness import FairAdmission
from gridroute.core.gateway_load import GatewayLoad
from gridroute.core.prefix import PrefixMap
from gridroute.gateway.routing import Routing

log = logging.getLogger("gridroute.gateway")


def _log_ejection(key: str, seconds: float, level: int) -> None:
    log.warning(
        "backend %s: ejected for %.1f s after consecutive gateway errors (ejection %d in a row)",
        key,
        seconds,
        level,
        extra={"event": "ejection", "key": key, "seconds": seconds, "level": level},
    )


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


@dataclass(frozen=True, slots=True)
class SiteReading:
    """One candidate as `/metrics` and `/grid/status` show it (None: no reading)."""

    view: SiteView
    own: int
    """This gateway's requests in flight to the candidate now."""
    weight: float | None
    """Capacity the draws use (from the first configured model the candidate serves)."""
    rho_reported: float | None
    """Smoothed rho from the site's own samples."""
    rho_counted: float | None
    """The site's estimated pressure now: `SiteView.counted_rho` with this gateway's own."""
    rho: float | None
    """What this gateway ranks the site by: `SiteView.pick_rho` when a model the site
    serves uses `gridroute`, the reported rho otherwise (`saturation`, `first`)."""


class CurrentGrid:
    """Snapshot holder, own-load counter and health table of one gateway worker."""

    def __init__(
        self,
        routing: Routing,
        settings: AvailabilitySettings,
        rng: Random | None = None,
        clock: Callable[[], float] = wall,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.routing = routing
        self.clock = clock
        """Wall clock: snapshot times and own-load change points (the samples' clock)."""
        self.monotonic = monotonic
        """Deadlines, timeouts and durations: never steps with the wall clock."""
        self.rng = rng or Random()
        self.own = OwnLoad()
        self.affinity = AffinityTable()
        """Session -> key that served it last (gateway config `affinity`)."""
        self.prefixes = PrefixMap()
        """Prefix block -> key that served it last (gateway config `prefix_affinity`)."""
        self.changes = Changes()
        self.ejections = Ejections(_log_ejection)
        """Candidates this worker set aside after consecutive gateway errors."""
        self.fairness = FairAdmission()
        """Fair admission order past capacity (`core/fairness.py`)."""
        # Budget rounding draws from its own stream (seeded from `rng`, so a seeded
        # gateway stays reproducible) and leaves the picks' sequence as it was.
        rounding = Random(self.rng.random())
        self.state = GridState(routing.candidates, settings, routing.models, rounding)
        self.health: dict[str, Health] = {}
        self._rounds: dict[str, float | None] = {}
        self.polls = 0
        """Operator reads folded in so far (readiness needs one)."""
        self.snapshot: Snapshot = self.state.refresh((), {}, clock(), self.health, self.own)

    def refresh(
        self,
        samples: Iterable[Sample],
        rounds: Mapping[str, float | None],
        now: float,
        gateways: GatewayLoad | None = None,
    ) -> Snapshot:
        """Fold one operator read in (with the gateways' reported load, when relayed) and
        publish the new snapshot."""
        self._rounds = dict(rounds)
        self.polls += 1
        snap = self.state.refresh(samples, rounds, now, self.health, self.own, gateways)
        return self._publish(snap)

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
        self.ejections.forget(keys)
        self._publish(self.state.refresh((), self._rounds, self.clock(), self.health, self.own))

    def readings(self) -> list[SiteReading]:
        """Every candidate of the current snapshot with its weight and rho figures.

        The one place both `/metrics` (at scrape) and `/grid/status` read them from;
        the formulas are the core's (`SiteView.counted_rho`, `SiteView.pick_rho`).
        """
        snap = self.snapshot
        policies = self.routing.policies
        weights: dict[str, float] = {}
        for model in policies:
            plan = snap.plan(model)
            if plan is not None:
                for k, w in plan.weights.items():
                    weights.setdefault(k, w)
        counts = self.own.counts
        accounting = snap.settings.local_accounting
        out = []
        for v in snap.views:
            own = counts.get(v.key, 0)
            if not v.measured:
                out.append(SiteReading(v, own, None, v.rho, None, None))
                continue
            picks = any(
                p is Policy.GRIDROUTE and v.candidate.serves(m) for m, p in policies.items()
            )
            # As the core's gridroute pick: own now with local accounting, else own at
            # the sample.
            pick = v.pick_rho(own if accounting else v.own_at_sample) if picks else v.rho
            out.append(SiteReading(v, own, weights.get(v.key), v.rho, v.counted_rho(own), pick))
        return out

    def _publish(self, snapshot: Snapshot) -> Snapshot:
        self.snapshot = snapshot
        self.changes.wake()
        return snapshot
