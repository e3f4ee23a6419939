"""Probes are real HTTP requests to each home; ready counts and capacity reports come
from a real gridroute operator (issue 13, "The map")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from gridroute.control.config import CapacityPolling, OperatorRef
from gridroute.control.readings import read_capacity
from gridroute.control.reconcile import Reconciler
from gridroute.control.store import Store
from gridroute.operator.config import parse_config
from gridroute.operator.service import Operator

from .controlfiles import Clock, seed, write
from .livehomes import Endpoint, Metrics, free_port, until

PROBE = {"periodSeconds": 1, "timeoutSeconds": 0.5, "failureThreshold": 2, "successThreshold": 2}


def probed(endpoints: list[Endpoint], **probe: object) -> dict:
    data = seed()
    data["probe"] = {**PROBE, **probe}
    for home, ep in zip(data["services"][0]["homes"], endpoints, strict=True):
        home["endpoint"] = ep.url
    return data


def table(tmp: Path) -> tuple[list[int], tuple[str, str]]:
    tm = Store(tmp / "state").read_map("llama-demo", "llama-chat")
    assert tm is not None
    routable = tm.status.condition("Routable")
    assert routable is not None
    return [e.weight for e in tm.spec.entries], (routable.status, routable.reason)


async def passes(rec: Reconciler, clock: Clock, n: int) -> None:
    async with aiohttp.ClientSession() as session:
        for _ in range(n):
            clock.now += 1.5
            await rec.run_once(session)


def test_failing_probe_gates_after_threshold_and_reopens_after_passes(tmp_path: Path) -> None:
    async def body() -> None:
        a, b = Endpoint(), Endpoint()
        await a.start()
        await b.start()
        try:
            clock = Clock()
            rec = Reconciler(write(tmp_path, probed([a, b])), clock=clock)
            await passes(rec, clock, 1)
            assert table(tmp_path)[0] == [2, 1]
            a.status = 503
            await passes(rec, clock, 1)
            assert table(tmp_path)[0] == [2, 1]  # one failure does not move traffic
            await passes(rec, clock, 1)
            assert table(tmp_path)[0] == [0, 1]
            tm = Store(tmp_path / "state").read_map("llama-demo", "llama-chat")
            assert tm is not None and tm.spec.entries[0].probe is not None
            assert tm.spec.entries[0].probe.gated and tm.spec.entries[0].probe.result == "Failing"
            assert tm.spec.entries[0].probe.policy_digest.startswith("sha256:")
            a.status = 200
            await passes(rec, clock, 1)
            assert table(tmp_path)[0] == [0, 1]  # successThreshold 2
            await passes(rec, clock, 1)
            assert table(tmp_path)[0] == [2, 1]
            assert a.hits == 5 and b.hits == 5
        finally:
            await a.stop()
            await b.stop()

    asyncio.run(body())


def test_unknown_statuses_never_gate_and_a_dead_endpoint_fails(tmp_path: Path) -> None:
    async def body() -> None:
        a, b = Endpoint(), Endpoint()
        await a.start()
        await b.start()
        try:
            clock = Clock()
            rec = Reconciler(write(tmp_path, probed([a, b])), clock=clock)
            a.status = 404  # a wrong probe path: the prober's fault, not the home's
            await passes(rec, clock, 3)
            assert table(tmp_path)[0] == [2, 1]
            await b.stop()  # connection refused: the home is unreachable
            await passes(rec, clock, 2)
            assert table(tmp_path)[0] == [1, 0]  # a gate comes before the reduction
        finally:
            await a.stop()

    asyncio.run(body())


def test_every_probe_failed_preserve_traffic_keeps_weights(tmp_path: Path) -> None:
    async def body() -> None:
        a, b = Endpoint(), Endpoint()
        await a.start()
        await b.start()
        try:
            clock = Clock()
            rec = Reconciler(write(tmp_path, probed([a, b])), clock=clock)
            a.status = b.status = 503
            await passes(rec, clock, 2)
            assert table(tmp_path) == ([2, 1], ("True", "AllHomesProbeFailed"))
            write(tmp_path, probed([a, b], allFailedPolicy="Drain"))
            await passes(rec, clock, 2)  # a new policy starts its hysteresis over
            assert table(tmp_path) == ([0, 0], ("False", "AllHomesProbeFailed"))
        finally:
            await a.stop()
            await b.stop()

    asyncio.run(body())


def test_a_restarted_control_plane_restores_the_gate_from_the_map(tmp_path: Path) -> None:
    async def body() -> None:
        a, b = Endpoint(), Endpoint()
        await a.start()
        await b.start()
        try:
            clock = Clock()
            path = write(tmp_path, probed([a, b]))
            rec = Reconciler(path, clock=clock)
            a.status = 503
            await passes(rec, clock, 2)
            assert table(tmp_path)[0] == [0, 1]
            a.status = 200
            again = Reconciler(path, clock=clock)
            await passes(again, clock, 1)  # one pass is not successThreshold 2
            assert table(tmp_path)[0] == [0, 1]
        finally:
            await a.stop()
            await b.stop()

    asyncio.run(body())


def test_ready_counts_and_capacity_reports_come_from_a_live_operator(tmp_path: Path) -> None:
    async def body() -> None:
        metrics = Metrics(endpoints=3)
        await metrics.start()
        port = free_port()
        op_config = parse_config(
            {
                "site": "site-a",
                "listen": f"127.0.0.1:{port}",
                "scrapeIntervalSeconds": 0.1,
                "providers": [
                    {
                        "name": "pool",
                        "models": ["m"],
                        "backendUrl": "http://127.0.0.1:1",
                        "metricsConfig": {"endpoint": f"http://127.0.0.1:{metrics.port}/metrics"},
                    }
                ],
            }
        )
        op = Operator(op_config)
        await op.start()
        try:
            await until(lambda: bool(op.store.latest()), "a first scrape")
            data = seed()
            data["capacityPolling"] = {
                "enabled": True,
                "periodSeconds": 1,
                "timeoutSeconds": 0.5,
                "samples": 1,
            }
            home_a = data["services"][0]["homes"][0]
            del home_a["ready"]
            home_a["operator"] = {"url": f"http://127.0.0.1:{port}", "provider": "pool"}
            rec = Reconciler(write(tmp_path, data))  # the wall clock: reports are stamped
            await rec.run_once()
            tm = Store(tmp_path / "state").read_map("llama-demo", "llama-chat")
            assert tm is not None
            a, b = tm.spec.entries
            assert a.capacity is not None and b.capacity is not None
            assert (a.capacity.ready, a.capacity.reported, a.capacity.allocated) == (3, 3, 3)
            assert a.capacity.source == "Endpoint"  # the report lowered allocated 4 to 3
            assert (a.weight, b.weight) == (3, 2)
            assert b.capacity.fallback_reason == "no operator to poll for capacity"
            fallback = tm.status.condition("CapacityFallback")
            assert fallback is not None
            assert (fallback.status, fallback.reason) == ("True", "EndpointCapacityUnavailable")
            metrics.endpoints = 1
            await until(lambda: op.store.latest()["site-a/pool"].ready == 1, "a new scrape")
            await rec.run_once()
            tm = Store(tmp_path / "state").read_map("llama-demo", "llama-chat")
            assert tm is not None
            assert [e.weight for e in tm.spec.entries] == [1, 2]
        finally:
            await op.stop()
            await metrics.stop()

    asyncio.run(body())


@pytest.mark.parametrize("method", ["GET", "HEAD", "POST"])
def test_capacity_polls_send_the_configured_method(method: str) -> None:
    """OME's capacity methods: the poll is sent with `method`, a POST with an empty body;
    a HEAD answer has no body, so it never carries a report."""
    seen: list[tuple[str, bytes, str | None]] = []

    async def capacity(request: web.Request) -> web.Response:
        seen.append((request.method, await request.read(), request.headers.get("Content-Length")))
        return web.json_response({"servable": 2, "observedAt": "2030-01-01T00:00:00Z"})

    async def body() -> None:
        app = web.Application()
        app.router.add_route("*", "/capacity/{provider}", capacity)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            ref = OperatorRef(url=f"http://127.0.0.1:{port}", provider="pool")
            polling = CapacityPolling(enabled=True, method=method)  # type: ignore[arg-type]
            async with aiohttp.ClientSession() as session:
                attempt = await read_capacity(session, ref, polling)
        finally:
            await runner.cleanup()
        assert [(m, b) for m, b, _ in seen] == [(method, b"")]
        if method == "POST":
            assert seen[0][2] == "0"
        if method == "HEAD":
            assert attempt.report is None and "no report" in (attempt.error or "")
        else:
            assert attempt.report is not None and attempt.report.servable == 2

    asyncio.run(body())
