"""Peer rounds degrade instead of collapsing: no head-of-line blocking, no poll storms,
backoff for a failing peer, and delta polls that carry only new rows."""

from __future__ import annotations

import asyncio
import email.utils
import time

from aiohttp import web
from operator_fixtures import MetricsServer, free_port, operator_config, vllm_page, vllm_provider
from prometheus_client import CollectorRegistry

from gridroute.core import Sample
from gridroute.operator.peer_rounds import PeerRounds, SkipMetrics, backoff_rounds, overloaded
from gridroute.operator.service import Operator
from gridroute.operator.store import RelayStore
from gridroute.relay.poller import PollLimits, PollMetrics, PollResult, SignalsClient
from gridroute.wire.signals import TIME_HEADER, encode_relay


class Peer:
    """A plain-HTTP peer answering `/signals` with one fresh sample of its site."""

    def __init__(self, site: str, delay_s: float = 0.0) -> None:
        self.site = site
        self.delay_s = delay_s
        self.requests = 0
        self.port = free_port()
        self._runner: web.AppRunner | None = None

    async def _signals(self, _: web.Request) -> web.Response:
        self.requests += 1
        await asyncio.sleep(self.delay_s)
        now = time.time()
        s = Sample(self.site, "p", now, running=1.0, waiting=0.0, ready=1.0, max_running=8.0)
        body = encode_relay([[s]], {}, local_site=self.site).body
        headers = {"Date": email.utils.formatdate(now, usegmt=True), TIME_HEADER: f"{now:.3f}"}
        return web.Response(body=body, headers=headers)

    async def __aenter__(self) -> Peer:
        app = web.Application()
        app.router.add_get("/signals", self._signals)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


def client(site: str, port: int, metrics: PollMetrics) -> SignalsClient:
    return SignalsClient(
        site,
        f"http://127.0.0.1:{port}/signals?scope=own",
        metrics=metrics,
        expected_site=site,
        limits=PollLimits(timeout_s=10.0),
    )


def rounds_over(
    clients: list[SignalsClient], store: RelayStore, registry: CollectorRegistry
) -> PeerRounds:
    return PeerRounds(
        clients, store, deadline_s=0.3, clock=time.time, metrics=SkipMetrics(registry)
    )


def skipped(registry: CollectorRegistry, target: str, reason: str) -> float:
    value = registry.get_sample_value(
        "grid_signals_poll_skipped_total", {"target": target, "reason": reason}
    )
    return value or 0.0


def test_a_frozen_peer_delays_nobody_and_is_not_polled_again_while_in_flight() -> None:
    async def scenario() -> None:
        registry = CollectorRegistry()
        metrics = PollMetrics(registry)
        store = RelayStore("hub")
        async with Peer("west") as west, Peer("east", delay_s=30.0) as east:
            clients = [client("west", west.port, metrics), client("east", east.port, metrics)]
            rounds = rounds_over(clients, store, registry)
            try:
                await rounds.round()
                # West's rows are in before east's poll ends (it is still running).
                assert "west/p" in store.latest() and "east/p" not in store.latest()
                first_end = store.round_ends["east"]
                for _ in range(3):
                    await rounds.round()
                assert east.requests == 1  # never a second poll, so never a new connection
                assert west.requests == 4
                assert skipped(registry, "east", "in_flight") == 3
                # One frozen peer of two is not overload: the interval keeps its length.
                assert rounds.stretch == 1.0
                assert registry.get_sample_value("grid_signals_poll_interval_stretch") == 1.0
                # East is judged at every round end all the same: it can go silent.
                assert store.round_ends["east"] > first_end
            finally:
                await rounds.close()
                for c in clients:
                    await c.close()

    asyncio.run(scenario())


def test_one_frozen_peer_among_healthy_ones_costs_only_its_own_poll() -> None:
    async def scenario() -> None:
        registry = CollectorRegistry()
        metrics = PollMetrics(registry)
        store = RelayStore("hub")
        healthy = [Peer(f"site{i}") for i in range(4)]
        frozen = Peer("frozen", delay_s=30.0)
        for p in [*healthy, frozen]:
            await p.__aenter__()
        clients = [client(p.site, p.port, metrics) for p in [*healthy, frozen]]
        rounds = rounds_over(clients, store, registry)
        try:
            for n in range(1, 6):
                await rounds.round()
                # Every healthy peer is polled, and stored, every round, at the
                # configured interval: the frozen one stretches nothing.
                assert [p.requests for p in healthy] == [n] * 4
                assert all(f"{p.site}/p" in store.latest() for p in healthy)
                assert rounds.stretch == 1.0
            assert frozen.requests == 1
            assert skipped(registry, "frozen", "in_flight") == 4
            assert "frozen/p" not in store.latest()
        finally:
            await rounds.close()
            for c in clients:
                await c.close()
            for p in [*healthy, frozen]:
                await p.__aexit__()

    asyncio.run(scenario())


def test_rounds_stretch_when_most_polls_overrun() -> None:
    async def scenario() -> None:
        registry = CollectorRegistry()
        metrics = PollMetrics(registry)
        store = RelayStore("hub")
        healthy = Peer("quick")
        slow = [Peer(f"slow{i}", delay_s=30.0) for i in range(3)]
        for p in [healthy, *slow]:
            await p.__aenter__()
        clients = [client(p.site, p.port, metrics) for p in [healthy, *slow]]
        rounds = rounds_over(clients, store, registry)
        try:
            seen = []
            for _ in range(3):
                await rounds.round()
                seen.append(rounds.stretch)
            # Three of four polls still running at each deadline: that is overload,
            # so the interval doubles, up to 3x.
            assert seen == [2.0, 3.0, 3.0]
            assert registry.get_sample_value("grid_signals_poll_interval_stretch") == 3.0
        finally:
            await rounds.close()
            for c in clients:
                await c.close()
            for p in [healthy, *slow]:
                await p.__aexit__()

    asyncio.run(scenario())


def test_overload_is_most_of_the_waited_polls_overrunning() -> None:
    assert not overloaded(waited=0, running=0)
    assert not overloaded(waited=10, running=1)  # one frozen peer among healthy ones
    assert not overloaded(waited=2, running=1)  # half is not most
    assert overloaded(waited=3, running=2)
    assert overloaded(waited=1, running=1)  # a single peer: nothing to compare it with


def test_the_stretch_goes_back_once_rounds_complete_in_time() -> None:
    async def scenario() -> None:
        registry = CollectorRegistry()
        store = RelayStore("hub")
        async with Peer("west") as west:
            c = client("west", west.port, PollMetrics(registry))
            rounds = rounds_over([c], store, registry)
            rounds.stretch = 3.0
            try:
                seen = []
                for _ in range(30):
                    await rounds.round()
                    seen.append(rounds.stretch)
                assert seen == sorted(seen, reverse=True) and seen[-1] < 1.2
            finally:
                await rounds.close()
                await c.close()

    asyncio.run(scenario())


def test_a_failing_peer_is_backed_off_but_still_judged_every_round() -> None:
    assert [backoff_rounds(n) for n in range(6)] == [0, 0, 1, 3, 3, 3]

    async def scenario() -> None:
        registry = CollectorRegistry()
        metrics = PollMetrics(registry)
        store = RelayStore("hub")
        dead = client("gone", free_port(), metrics)  # nothing listens there
        rounds = rounds_over([dead], store, registry)
        try:
            ends = []
            for _ in range(10):
                await rounds.round()
                ends.append(store.round_ends["gone"])
            polls = registry.get_sample_value(
                "grid_signals_poll_total", {"target": "gone", "result": "unreachable"}
            )
            # Tried in rounds 1, 2, 4 and 8: skipped 1, then 3, then 3 rounds.
            assert polls == 4
            assert skipped(registry, "gone", "backoff") == 6
            assert ends == sorted(ends) and len(set(ends)) == 10
        finally:
            await rounds.close()
            await dead.close()

    asyncio.run(scenario())


def test_delta_polls_carry_only_rows_newer_than_the_cursor() -> None:
    async def scenario() -> None:
        async with MetricsServer(vllm_page(2.0)) as metrics_srv:
            cfg = operator_config(
                "hub",
                free_port(),
                certs=None,
                providers=[vllm_provider("pool", metrics_srv.port)],
                interval=60.0,  # no background scrape between the polls below
            )
            op = Operator(cfg)
            await op.start()
            poll_metrics = PollMetrics(CollectorRegistry())
            reader = client("hub", op.port or 0, poll_metrics)
            reader.delta = True
            try:
                for _ in range(3):
                    await op.scrape_round()
                    await asyncio.sleep(0.01)
                full = await reader.poll()
                assert full.result is PollResult.OK and full.decoded is not None
                held = len(full.decoded.received)
                assert held >= 3 and reader.cursor is not None
                empty = await reader.poll()  # nothing new since
                assert empty.result is PollResult.OK and empty.decoded is not None
                assert empty.decoded.received == ()
                await op.scrape_round()
                one = await reader.poll()
                assert one.decoded is not None and len(one.decoded.received) == 1
                assert one.body_bytes < full.body_bytes
                # A cursor from another epoch (a restarted operator) gets the whole window.
                reader.cursor = "0." + reader.cursor.rpartition(".")[2]
                again = await reader.poll()
                assert again.decoded is not None and len(again.decoded.received) == held + 1
            finally:
                await reader.close()
                await op.stop()

    asyncio.run(scenario())


def test_store_cursors() -> None:
    store = RelayStore("hub", epoch="e1")
    assert store.rows_after(None) is None and store.rows_after("") is None
    for i in range(3):
        store.add_local(Sample("hub", "p", 100.0 + i, running=1.0, ready=1.0, max_running=8.0))
    assert store.cursor() == "e1.3"
    assert store.rows_after("e1.2") == 2
    assert store.rows_after("e1.9") is None  # ahead of this store: serve everything
    assert store.rows_after("e0.2") is None and store.rows_after("e1.x") is None
    newer = store.histories(own_only=True, after=2)
    assert [[s.at for s in h] for h in newer] == [[102.0]]
