"""The poll loop folds good reads into the snapshot and ignores failed ones."""

from __future__ import annotations

import time

import pytest

from gridroute.core import Live, Sample
from gridroute.gateway.signals_loop import SignalsLoop
from gridroute.relay.poller import PollOutcome, PollResult
from gridroute.wire.signals import Decoded, Received
from tests.gateway.harness import fake, run, running_grid


class _Script:
    def __init__(self, outcomes: list[PollOutcome]) -> None:
        self.outcomes = outcomes

    async def poll(self) -> PollOutcome:
        return self.outcomes.pop(0)

    async def close(self) -> None:
        return None


def _ok(samples: list[Sample], rounds: dict[str, float]) -> PollOutcome:
    now = time.time()
    decoded = Decoded(tuple(Received(int(s.at * 1000), s) for s in samples), rounds)
    return PollOutcome("local", PollResult.OK, now, now, decoded=decoded)


def test_good_read_refreshes_and_failed_read_keeps_the_snapshot() -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a"), "b": fake("b")}, local_site="a") as g:
            current = g.gw.current
            now = time.time()
            samples = [
                Sample("a", "a", now, running=1.0, waiting=0.0, ready=1.0, max_running=8.0),
                Sample("b", "b", now, running=2.0, waiting=0.0, ready=1.0, max_running=8.0),
            ]
            loop = SignalsLoop(_Script([]), lambda: current, "a", 1.0)
            loop.fold(_ok(samples, {"b": now}))
            assert loop.completed == 1
            snap = current.snapshot
            view_a, view_b = snap.view("a/a"), snap.view("b/b")
            assert view_a is not None and view_a.live is Live.LIVE and view_a.capacity == 8.0
            assert view_b is not None and view_b.measured
            failed = PollOutcome("local", PollResult.UNREACHABLE, now, now, error="refused")
            loop.fold(failed)
            assert loop.completed == 2
            assert current.snapshot is snap  # nothing changes on a failed poll

    run(scenario)


def test_sites_the_operator_does_not_deliver_are_named_once_and_in_status(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        sites = {"a": fake("a"), "b": fake("b"), "c": fake("c")}
        async with running_grid(sites, local_site="a") as g:
            current = g.gw.current
            now = time.time()
            samples = [
                Sample(s, s, now, running=1.0, waiting=0.0, ready=1.0, max_running=8.0)
                for s in ("a", "b")
            ]
            loop = SignalsLoop(_Script([]), lambda: current, "a", 1.0)
            g.gw.signals = loop
            with caplog.at_level("WARNING", logger="gridroute.gateway"):
                loop.fold(_ok(samples, {"b": now}))  # a ring: the operator polls b only
                loop.fold(_ok(samples, {"b": now}))
            assert loop.undelivered == {"c"}
            warned = [r for r in caplog.records if "delivers nothing of c" in r.getMessage()]
            assert len(warned) == 1  # once, not per poll
            status = await _status(g.url)
            assert status["poll"]["undelivered"] == ["c"]
            loop.fold(_ok(samples, {"b": now, "c": now}))
            assert loop.undelivered == frozenset()

    run(scenario)


async def _status(url: str) -> dict[str, object]:
    import aiohttp

    async with aiohttp.ClientSession() as s, s.get(url + "/grid/status") as resp:
        return dict(await resp.json())
