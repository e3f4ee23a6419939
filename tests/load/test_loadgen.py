"""The closed-loop load generator against real fake servers on loopback."""

import asyncio
import socket
from typing import Any

from aiohttp import web

from gridroute.fakeserver.server import FakeServerConfig, start_fake_server
from gridroute.load.generator import Phase, retry_after_s, run_load
from gridroute.load.result import RequestOutcome


def with_server(coro_fn: Any, **cfg: Any) -> Any:
    async def main() -> Any:
        async with await start_fake_server(FakeServerConfig(**cfg)) as srv:
            return await coro_fn(srv)

    return asyncio.run(main())


def test_closed_loop_is_bounded_by_slots() -> None:
    # 8 clients on 4 slots of 50 ms: 80 req/s at most, so about 160 in 2 s.
    async def go(srv: Any) -> None:
        result = await run_load(srv.url, clients=8, duration_s=2.0)
        assert 0.75 * 160 <= result.ok <= 1.1 * 160
        assert result.ok == len(result.records) == srv.state.stats()["served"]
        assert result.per_site == {"A": result.ok}
        assert result.shares == {"A": 1.0}
        assert result.latency_s(0.5) >= 0.05 * 2 * 0.95  # half the clients always wait
        assert sum(sum(b.values()) for b in result.timeseries()) == result.ok

    with_server(go, slots=4, service_s=0.05, name="A")


def test_phases_change_the_number_of_clients() -> None:
    async def go(srv: Any) -> None:
        result = await run_load(srv.url, phases=[Phase(1.0, 1), (1.0, 6)])
        slow, fast = result.phase_ok(0), result.phase_ok(1)
        assert 10 <= slow <= 22  # 1 client at 50 ms: about 20
        assert fast > 2 * slow  # 6 clients on 6 slots

    with_server(go, slots=6, service_s=0.05)


def test_request_count_and_stream() -> None:
    async def go(srv: Any) -> None:
        result = await run_load(srv.url + "/v1", clients=4, requests=25, stream=True)
        assert len(result.records) == result.ok == 25
        assert all(r.ttft_s is not None and r.ttft_s <= r.latency_s for r in result.records)
        completions = await run_load(srv.url, clients=2, requests=3, api="completions")
        assert completions.ok == 3

    with_server(go, slots=4, service_s=0.0, per_token_s=0.002, tokens=5)


def test_honours_retry_after_on_429() -> None:
    # One slot, no queue: 3 of 4 clients are shed at any time. Retry-After 1 s keeps each
    # shed client away 0.5..1 s, so few sheds; ignoring it would mean thousands.
    async def go(srv: Any) -> None:
        result = await run_load(srv.url, clients=4, duration_s=1.5)
        assert 1 <= result.shed <= 4 * 4
        assert result.ok >= 5
        assert result.failed == 0

    with_server(go, slots=1, max_queue=0, service_s=0.05, retry_after_s=1)


def test_5xx_and_refused_connections_count_as_failed() -> None:
    async def go(srv: Any) -> None:
        srv.state.fail(503, None)
        result = await run_load(srv.url, clients=2, requests=4)
        assert result.failed == 4
        assert {r.status for r in result.records} == {503}

    with_server(go)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the run: nothing listens
    result = asyncio.run(run_load(f"http://127.0.0.1:{port}", clients=2, duration_s=0.3))
    assert result.failed == len(result.records) >= 2
    assert all(r.status == 0 and r.outcome is RequestOutcome.FAILED for r in result.records)
    assert len(result.records) <= 2 * (0.3 / 0.05 + 2)  # backed off, not spinning


def test_gateway_site_header_wins_over_backend_name() -> None:
    async def main() -> None:
        async def handler(_: web.Request) -> web.Response:
            return web.json_response({}, headers={"x-grid-site": "east", "x-fake-server": "b1"})

        app = web.Application()
        app.router.add_post("/v1/chat/completions", handler)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            url = f"http://127.0.0.1:{runner.addresses[0][1]}"
            result = await run_load(url, clients=1, requests=2)
            assert result.per_site == {"east": 2}
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_retry_after_parsing() -> None:
    assert retry_after_s("2") == 2.0
    assert retry_after_s("0.5") == 0.5
    assert retry_after_s("-3") == 0.0
    assert retry_after_s(None) is None
    assert retry_after_s("soon") is None
    assert retry_after_s("Wed, 21 Oct 2015 07:28:10 GMT", now=1445412480.0) == 10.0
