"""A three-site ring of real operators over mutual TLS on loopback."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from operator_fixtures import (
    Certs,
    MetricsServer,
    client_ssl,
    free_port,
    operator_config,
    read_local,
    vllm_page,
    vllm_provider,
)

from gridroute.operator.service import Operator
from gridroute.relay.poller import PollResult

RUNNING = {"hub": 2.0, "west": 5.0, "east": 7.0}


async def until(check: Callable[[], bool], what: str, rounds: int = 200) -> None:
    """Wait (generously) for a condition; the test asserts on state, not on time."""
    for _ in range(rounds):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


async def with_ring(certs: Certs, body: Callable[[dict[str, Operator]], Awaitable[None]]) -> None:
    ports = {site: free_port() for site in RUNNING}
    servers = {site: MetricsServer(vllm_page(r)) for site, r in RUNNING.items()}
    for server in servers.values():
        await server.__aenter__()
    ops = {
        site: Operator(
            operator_config(
                site,
                ports[site],
                certs=certs,
                peers={s: p for s, p in ports.items() if s != site},
                providers=[vllm_provider("pool", servers[site].port)],
            )
        )
        for site in RUNNING
    }
    try:
        for op in ops.values():
            await op.start()
        await body(ops)
    finally:
        for op in ops.values():
            await op.stop()
        for server in servers.values():
            await server.__aexit__()


def test_three_operators_converge_to_every_sites_readings(certs: Certs) -> None:
    async def body(ops: dict[str, Operator]) -> None:
        await until(
            lambda: all(f"{s}/pool" in op.store.latest() for s, op in ops.items()),
            "every operator scraped its own provider",
        )
        start = {s: op.rounds for s, op in ops.items()}
        await until(lambda: all(op.rounds >= start[s] + 2 for s, op in ops.items()), "2 rounds")
        for site, op in ops.items():
            latest = op.store.latest()
            for other, running in RUNNING.items():
                sample = latest[f"{other}/pool"]
                assert sample.site == other and sample.running == running, (site, other)
                assert sample.max_running == 16.0 and sample.ready == 1.0
                assert sample.generation is not None

        # A gateway at hub reads every site's rows from its own operator, with the same client.
        outcome = await read_local(certs, ops["hub"].port)
        assert outcome.result is PollResult.OK and outcome.decoded is not None
        assert {s.site for s in outcome.decoded.samples} == set(RUNNING)
        assert set(outcome.decoded.round_ends) == {"west", "east"}
        assert outcome.decoded.dropped == {}

        # Each operator's own metrics and status tell the same story.
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=client_ssl(certs.tls("hub")))
        ) as http:
            base = f"https://127.0.0.1:{ops['hub'].port}"
            async with http.get(base + "/metrics") as resp:
                text = await resp.text()
            assert 'grid_signals_poll_total{result="ok",target="west"}' in text
            assert 'grid_provider_scrape_total{provider="pool",result="ok"}' in text
            async with http.get(base + "/status") as resp:
                status = json.loads(await resp.text())
            async with http.get(base + "/healthz") as resp:
                assert resp.status == 200
        (provider,) = status["providers"]
        assert provider["conditions"][0]["type"] == "MetricsAvailable"
        assert provider["conditions"][0]["status"] == "True"
        assert provider["latest"]["inFlight"] == 2.0
        assert provider["ceiling"]["effective"] == 16.0  # maxRunning x 1 ready endpoint
        assert provider["ceiling"]["rho"] == pytest.approx(2.0 / 16.0)
        assert {p["site"]: p["result"] for p in status["peers"]} == {"west": "ok", "east": "ok"}

    asyncio.run(with_ring(certs, body))


def test_peer_stopped_and_started_again_logs_once_each_way(
    certs: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gridroute.operator.hub")

    async def body(ops: dict[str, Operator]) -> None:
        hub, west = ops["hub"], ops["west"]
        (to_west,) = [c for c in hub.peers if c.target == "west"]
        await until(
            lambda: (
                to_west.latest is not None
                and to_west.latest.result == "ok"
                and "west/pool" in hub.store.latest()
            ),  # a poll that carried west's rows
            "ok",
        )
        caplog.clear()  # forget polls made while the ring was still starting
        await west.stop()
        before = hub.rounds
        await until(lambda: hub.rounds >= before + 4, "hub polled a stopped west 4 times")
        assert to_west.failing and to_west.latest is not None
        assert to_west.latest.result is PollResult.UNREACHABLE
        # the partitioned site keeps its last rows; its round ends keep advancing
        assert "west/pool" in hub.store.latest()

        restarted = Operator(west.config)
        ops["west"] = restarted  # with_ring stops it
        await restarted.start()
        await until(lambda: not to_west.failing, "west recovered")
        hub_log = [r for r in caplog.records if r.name == "gridroute.operator.hub"]
        failing = [r for r in hub_log if "west failing" in r.getMessage()]
        recovered = [r for r in hub_log if "west recovered" in r.getMessage()]
        assert len(failing) == 1 and len(recovered) == 1
        assert failing[0].levelno == logging.WARNING

    asyncio.run(with_ring(certs, body))


def test_operator_restarted_during_a_partition_invents_no_rows(certs: Certs) -> None:
    """The partitioned peer never answered this operator: it serves a round end, no rows."""

    async def main() -> None:
        port = free_port()
        cfg = operator_config("hub", port, certs=certs, peers={"west": free_port()})
        op = Operator(cfg)
        await op.start()
        try:
            await until(lambda: op.rounds >= 2, "two rounds against the dark peer")
            outcome = await read_local(certs, port)
        finally:
            await op.stop()
        assert outcome.decoded is not None
        assert outcome.decoded.samples == ()
        assert "west" in outcome.decoded.round_ends
        assert op.peers[0].latest is not None
        assert op.peers[0].latest.result is PollResult.UNREACHABLE

    asyncio.run(main())
