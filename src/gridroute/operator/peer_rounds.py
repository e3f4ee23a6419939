"""Peer poll rounds that degrade under overload instead of collapsing.

The wave-1 round polled every peer with a per-poll timeout and stored nothing until
the whole round returned. Under CPU overload that is metastable: polls pass the
timeout, a timed-out poll drops its kept-alive connection, the next poll pays a new
TCP + TLS handshake on both ends, which costs more CPU, which times out more polls;
the grid stays down after the load that caused it has passed. A frozen peer also
delayed every other peer's rows by its timeout. Here instead:

* **A round has a deadline, a poll does not end at it.** The round waits at most
  `deadline_s` (the operator's `peerPollTimeoutSeconds`); a poll still running then
  keeps going (its connection survives) and no second poll of that peer starts while
  it runs. Its rows are stored when it completes; the poll itself gives up only after
  `POLL_GIVE_UP_ROUNDS` intervals.
* **Rows are stored as each poll completes**, so a frozen peer delays nobody else.
* **A failing peer is backed off**: after n consecutive failures it is skipped for
  min(2^(n-1) - 1, `MAX_SKIPPED_ROUNDS`) rounds, so a dead peer costs a connect attempt
  every few seconds instead of every second.
* **Rounds stretch under overload**: a round in which most of the polls it waited on
  (started in it, or still in flight from an earlier one) are still running at its
  deadline doubles `stretch`, the factor on the poll interval, up to `MAX_STRETCH`;
  any other round takes a tenth of the excess back. Most polls overrunning is what
  overload looks like (the operator, or the peers as a whole, cannot keep up), and
  fewer polls per second is what relieves an overloaded mesh: freshness degrades
  (older samples, still inside the freshness window) instead of the grid collapsing.
  One frozen or slow peer is not overload: it costs only its own poll, and the other
  peers keep their interval (the wave-2 rule stretched on any one overrun, so a
  single frozen peer slowed every peer's rows to 3x).
* **Judgement keeps the seed's rule**: every peer's round end is the end of the round
  that tried it, also when its poll is still in flight or backed off (it is being
  tried, and it is failing), so a dead peer still goes silent on time.

`grid_signals_poll_skipped_total{target, reason}` counts rounds in which a peer was
not polled (`in_flight`, `backoff`): overload shows as degraded freshness, counted.

The rounds may run on a loop of their own (the operator runs them on its peer thread,
`peer_thread.py`, so that peer polling work never delays the local gateways' reads):
everything they change in the store goes through `deliver`, which the operator points
at its main loop (`call_soon_threadsafe`); by default it is called at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

from gridroute.operator.store import RelayStore
from gridroute.relay.poller import PollOutcome, PollResult, SignalsClient

POLL_GIVE_UP_ROUNDS = 4
"""A peer poll is abandoned after this many poll intervals."""
MAX_SKIPPED_ROUNDS = 3
"""A failing peer is tried at least every this many rounds + 1."""
MAX_STRETCH = 3.0
"""The poll interval stretches at most to this many times its configured value, so a
sample at the gateway stays well inside the default 5 s freshness window at a 1 s
interval."""


class SkipMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.skipped = Counter(
            "grid_signals_poll_skipped_total",
            "Rounds in which a peer was not polled: its last poll still running, or backed off.",
            ["target", "reason"],
            registry=registry,
        )
        self.stretch = Gauge(
            "grid_signals_poll_interval_stretch",
            "Factor on the peer poll interval; above 1 while rounds overrun their deadline.",
            registry=registry,
        )
        self.stretch.set(1.0)


@dataclass
class _Peer:
    client: SignalsClient
    task: asyncio.Task[PollOutcome] | None = None
    failures: int = 0
    skip: int = 0


def backoff_rounds(failures: int) -> int:
    """Rounds to skip after `failures` consecutive failed polls (0, 1, 3, 3, ...)."""
    if failures <= 1:
        return 0
    return min((1 << (failures - 1)) - 1, MAX_SKIPPED_ROUNDS)


def overloaded(*, waited: int, running: int) -> bool:
    """Whether a round that waited on `waited` polls, `running` of them still running at
    its deadline, shows overload: more than half overran. One frozen peer among healthy
    ones is not overload; a round that waited on nothing is not either."""
    return running * 2 > waited


def _now(change: Callable[[], None]) -> None:
    change()


class PeerRounds:
    """Runs poll rounds over `clients`, storing into `store`."""

    def __init__(
        self,
        clients: list[SignalsClient],
        store: RelayStore,
        *,
        deadline_s: float,
        clock: Callable[[], float],
        metrics: SkipMetrics,
    ) -> None:
        self.peers = [_Peer(c) for c in clients]
        self.store = store
        self.deadline_s = deadline_s
        self.clock = clock
        self.metrics = metrics
        self.rounds = 0
        self.stretch = 1.0
        """Factor on the poll interval: > 1 while rounds overrun (see the module doc)."""
        self.on_decoded: Callable[[PollOutcome], None] | None = None
        """Called with each poll that decoded (the operator keeps the peer's gateway sums)."""
        self.deliver: Callable[[Callable[[], None]], object] = _now
        """Runs a change of the store (and `on_decoded`) where the store lives."""

    def _store_rows(self, outcome: PollOutcome) -> None:
        assert outcome.decoded is not None
        self.store.add_peer(outcome.target, outcome.decoded.received)
        if self.on_decoded is not None:
            self.on_decoded(outcome)

    def _round_ended(self, ended: float) -> None:
        for peer in self.peers:
            self.store.round_end(peer.client.target, ended)

    def _completed(self, peer: _Peer, outcome: PollOutcome) -> None:
        if outcome.decoded is not None:
            self.deliver(functools.partial(self._store_rows, outcome))
        if outcome.result is PollResult.OK:
            peer.failures = 0
        else:
            peer.failures += 1
            peer.skip = backoff_rounds(peer.failures)

    async def _poll(self, peer: _Peer) -> PollOutcome:
        outcome = await peer.client.poll()
        self._completed(peer, outcome)
        return outcome

    async def round(self) -> None:
        """Start a poll of every peer that is neither in flight nor backed off; wait at
        most `deadline_s`; then record the round end of every peer."""
        waiting: list[asyncio.Task[PollOutcome]] = []
        for peer in self.peers:
            target = peer.client.target
            if peer.task is not None and not peer.task.done():
                self.metrics.skipped.labels(target, "in_flight").inc()
                waiting.append(peer.task)
                continue
            if peer.skip > 0:
                peer.skip -= 1
                self.metrics.skipped.labels(target, "backoff").inc()
                continue
            peer.task = asyncio.create_task(self._poll(peer), name=f"poll-{target}")
            waiting.append(peer.task)
        if waiting:
            await asyncio.wait(waiting, timeout=self.deadline_s)
        if overloaded(waited=len(waiting), running=sum(not t.done() for t in waiting)):
            self.stretch = min(MAX_STRETCH, self.stretch * 2.0)
        else:
            self.stretch = max(1.0, 1.0 + (self.stretch - 1.0) * 0.9)
        self.metrics.stretch.set(self.stretch)
        self.deliver(functools.partial(self._round_ended, self.clock()))
        self.rounds += 1

    async def close(self) -> None:
        for peer in self.peers:
            if peer.task is not None:
                peer.task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await peer.task
                peer.task = None
