"""The one poll: read the local operator's `/signals` once per interval, publish a snapshot.

The bounded client, its result metrics (`grid_signals_*`) and its transition logging
are the operator's (`gridroute.relay.poller.SignalsClient`); this loop only paces it
and folds each good read into the live grid. A failed poll changes nothing: the
snapshot stays, and since the local site is judged at the last good read, a stalled
operator pauses the silence judgement instead of silencing every site.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

from gridroute.core import Sample
from gridroute.gateway.current import CurrentGrid
from gridroute.gateway.load_report import LoadReport
from gridroute.relay.poller import PollOutcome, PollResult

log = logging.getLogger("gridroute.gateway")


class SignalsSource(Protocol):
    """What the loop needs of a poller (the real one, or a test's fake)."""

    async def poll(self) -> PollOutcome: ...

    async def close(self) -> None: ...


class SignalsLoop:
    """Polls `source` every `interval_s`; counts completed polls for readiness."""

    def __init__(
        self,
        source: SignalsSource,
        current: Callable[[], CurrentGrid],
        local_site: str | None,
        interval_s: float,
        bound: Callable[[Iterable[Sample]], Iterable[Sample]] | None = None,
        report: LoadReport | None = None,
    ) -> None:
        self.source = source
        self.bound = bound
        """Applied to each read's samples before they are folded (`gateway.claims`)."""
        self._current = current
        self.report = report
        """This worker's load report (sent with each poll), when the source takes one."""
        self.local_site = local_site
        self.interval_s = interval_s
        self.completed = 0
        """Polls finished, whatever their result (readiness needs one)."""
        self.latest: PollOutcome | None = None
        self.undelivered: frozenset[str] = frozenset()
        """Configured sites the source does not deliver: neither rows nor a poll round
        of them (a partial peer set: the local operator polls no peer for them)."""

    def fold(self, outcome: PollOutcome) -> None:
        """Adopt one poll outcome: a good read refreshes the snapshot."""
        self.latest = outcome
        self.completed += 1
        decoded = outcome.decoded
        if outcome.result is not PollResult.OK or decoded is None:
            return
        current = self._current()
        rounds: dict[str, float | None] = dict(decoded.round_ends)
        if self.local_site is not None:
            rounds[self.local_site] = outcome.ended_at
        self._note_undelivered(current, rounds, decoded.samples)
        now = current.clock()
        gateways = None if self.report is None else self.report.load(decoded, now)
        samples: Iterable[Sample] = decoded.samples
        if self.bound is not None:
            samples = self.bound(samples)
        current.refresh(samples, rounds, now, gateways)

    def _note_undelivered(
        self, current: CurrentGrid, rounds: dict[str, float | None], samples: Sequence[Sample]
    ) -> None:
        """There is no transitive relay, by design: a site reaches this gateway only
        if its local operator polls it. Say so once, when the set changes."""
        configured = {c.site for c in current.routing.candidates}
        delivered = set(rounds) | {s.site for s in samples}
        missing = frozenset(configured - delivered)
        if missing != self.undelivered:
            if missing:
                log.warning(
                    "signals: the local operator delivers nothing of %s (no rows, no poll "
                    "round): they stay unmeasured; add them to the operator's peers",
                    ", ".join(sorted(missing)),
                )
            elif self.undelivered:
                log.info("signals: every configured site is delivered now")
            self.undelivered = missing

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                self.fold(await self.source.poll())
            except asyncio.CancelledError:
                raise
            except Exception:  # a bug in folding must not stop the polling
                log.exception("signals: folding a poll failed")
            await asyncio.sleep(max(0.0, self.interval_s - (loop.time() - started)))
