"""A peer that comes back is polled at once: the backoff spaces out fast failures only.

Why this matters: the seed says a returned site is live again after two new samples,
"about two peer polls". A frozen (or black-holed) peer fails each poll only at the give-up
time, and if those failures were backed off too, the first poll after it thaws could come
several rounds late (the demo measured 4 s, and the site live again after 6 s). The
clients here are scripted: every poll's outcome, and how long it ran, is chosen by the
test, so the rounds are exact.
"""

from __future__ import annotations

import asyncio
from typing import cast

from prometheus_client import CollectorRegistry

from gridroute.core import Sample
from gridroute.operator.peer_rounds import PeerRounds, SkipMetrics
from gridroute.operator.store import RelayStore
from gridroute.relay.poller import PollOutcome, PollResult, SignalsClient
from gridroute.wire.signals import Decoded, Received

DEADLINE_S = 0.8
"""The round deadline (`peerPollTimeoutSeconds`); polls give up after 4 s."""


class ScriptedPeer:
    """A signals client whose polls end as scripted: `down` polls fail after `took_s`
    (4 s: a hang that ran into the give-up time; 0.01 s: refused at once); once `down`
    is cleared they answer with one new sample each."""

    def __init__(self, target: str, took_s: float) -> None:
        self.target = target
        self.took_s = took_s
        self.down = True
        self.polls = 0
        self.now = 1000.0

    async def poll(self) -> PollOutcome:
        self.polls += 1
        self.now += 1.0
        if self.down:
            started = self.now
            return PollOutcome(self.target, PollResult.UNREACHABLE, started, started + self.took_s)
        sample = Sample(self.target, "p", self.now, running=1.0, ready=1.0, max_running=8.0)
        decoded = Decoded((Received(int(self.now * 1000), sample),), {})
        return PollOutcome(self.target, PollResult.OK, self.now, self.now + 0.01, decoded)


def polls_until_back(took_s: float) -> tuple[list[int], int]:
    """Ten rounds down, then back: the rounds that polled the peer while down, and how
    many rounds after its return passed before its first new sample was stored."""

    async def scenario() -> tuple[list[int], int]:
        peer = ScriptedPeer("east", took_s)
        store = RelayStore("hub")
        rounds = PeerRounds(
            [cast(SignalsClient, peer)],
            store,
            deadline_s=DEADLINE_S,
            clock=lambda: peer.now,
            metrics=SkipMetrics(CollectorRegistry()),
        )
        polled = []
        for n in range(10):
            before = peer.polls
            await rounds.round()
            if peer.polls > before:
                polled.append(n)
        peer.down = False
        waited = 0
        while "east/p" not in store.latest():
            await rounds.round()
            waited += 1
        return polled, waited

    return asyncio.run(scenario())


def test_a_peer_whose_polls_hang_is_polled_in_the_first_round_after_it_returns() -> None:
    polled, waited = polls_until_back(took_s=4.0)
    # Every failure took the give-up time: no round is skipped for backoff after it
    # (its hang was the spacing), so the peer is polled every round the script allows...
    assert polled == list(range(10))
    # ...and the round right after its return brings its rows.
    assert waited == 1


def test_a_refusing_peer_is_still_backed_off() -> None:
    polled, waited = polls_until_back(took_s=0.01)
    # Fast failures: skipped 1, then 3, then 3 rounds, as before.
    assert polled == [0, 1, 3, 7]
    # Its return waits out the rest of the current backoff (here 2 rounds): the
    # price of not polling a refusing peer every round.
    assert waited == 2
