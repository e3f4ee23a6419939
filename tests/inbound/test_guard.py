"""Listener bounds against real loopback sockets: timeouts, the connection limit, and
JSON bodies for what aiohttp answered in text/plain. Intervals are a few tenths of a
second; nothing asserts how long anything took, only what came back and what counted.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from gridroute.inbound.client_errors import Kind
from tests.gateway.harness import fake, run, running_grid
from tests.inbound.rawhttp import closed, connect, exchange, post, read_answer

pytestmark = pytest.mark.usefixtures("each_listener")  # both API listeners

FAST = {
    "header_timeout_s": 0.3,
    "body_timeout_s": 0.3,
    "keepalive_timeout_s": 0.3,
    "max_connections": 64,
}
CHAT = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


def grid(**listener: Any) -> Any:
    return running_grid({"a": fake("a")}, listener={**FAST, **listener})


def test_slow_loris_headers_get_408_json_and_close() -> None:
    async def scenario() -> None:
        async with grid() as g:
            reader, writer = await connect(g.url)
            writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\n")
            answer = await read_answer(reader)  # no more bytes ever come
            assert answer is not None and answer.status == 408
            assert answer.headers["connection"] == "close"
            assert answer.json()["error"]["code"] == "timeout"
            assert await closed(reader)
            writer.close()
            assert g.gw.client_errors.counts[Kind.HEADER_TIMEOUT] == 1
            assert g.gw.guard.open == 0

    run(scenario)


def test_a_connection_that_never_speaks_is_closed_and_counted() -> None:
    async def scenario() -> None:
        async with grid() as g:
            conns = [await connect(g.url) for _ in range(20)]
            for reader, _ in conns:
                assert await closed(reader)
            for _, writer in conns:
                writer.close()
            assert g.gw.client_errors.counts[Kind.HEADER_TIMEOUT] == 20
            assert g.gw.guard.open == 0

    run(scenario)


def test_a_body_shorter_than_its_content_length_gets_408_and_close() -> None:
    async def scenario() -> None:
        async with grid() as g:
            reader, writer = await connect(g.url)
            raw = post("/v1/chat/completions", CHAT).replace(
                f"Content-Length: {len(CHAT)}".encode(), b"Content-Length: 5000"
            )
            writer.write(raw)
            answer = await read_answer(reader)
            assert answer is not None and answer.status == 408
            assert answer.json()["error"]["type"] == "invalid_request_error"
            assert answer.headers["connection"] == "close"
            assert await closed(reader)
            writer.close()
            assert g.gw.client_errors.counts[Kind.BODY_TIMEOUT] == 1
            assert g.in_flight() == 0

    run(scenario)


def test_an_idle_kept_alive_connection_is_closed_after_its_answer() -> None:
    async def scenario() -> None:
        async with grid() as g:
            reader, writer = await connect(g.url)
            writer.write(post("/v1/chat/completions", CHAT))
            answer = await read_answer(reader)
            assert answer is not None and answer.status == 200
            assert answer.headers.get("connection", "keep-alive").lower() != "close"
            assert await closed(reader)  # then nothing: the idle timer closes it
            writer.close()
            assert g.gw.client_errors.counts[Kind.IDLE_TIMEOUT] == 1
            assert g.gw.client_errors.counts[Kind.HEADER_TIMEOUT] == 0

    run(scenario)


def test_a_kept_alive_connection_serves_several_requests_within_the_bounds() -> None:
    async def scenario() -> None:
        async with grid(header_timeout_s=5, keepalive_timeout_s=5) as g:
            reader, writer = await connect(g.url)
            for _ in range(5):
                writer.write(post("/v1/chat/completions", CHAT))
                answer = await read_answer(reader)
                assert answer is not None and answer.status == 200
            writer.close()
            assert sum(g.gw.client_errors.counts.values()) == 0

    run(scenario)


def test_connections_over_the_limit_get_503_json_and_close() -> None:
    async def scenario() -> None:
        async with grid(max_connections=3, header_timeout_s=5) as g:
            held = [await connect(g.url) for _ in range(3)]
            await asyncio.sleep(0.05)  # let the server accept them
            reader, writer = await connect(g.url)
            answer = await read_answer(reader)
            assert answer is not None and answer.status == 503
            assert answer.json()["error"]["code"] == "too_many_connections"
            assert answer.headers["retry-after"] == "1"
            assert await closed(reader)
            writer.close()
            assert g.gw.client_errors.counts[Kind.CONNECTION_LIMIT] == 1
            # A held connection still works, and one freed slot admits a new one.
            r0, w0 = held[0]
            w0.write(post("/v1/chat/completions", CHAT))
            ok = await read_answer(r0)
            assert ok is not None and ok.status == 200
            held[1][1].close()
            await asyncio.sleep(0.05)
            again = await exchange(g.url, post("/v1/chat/completions", CHAT))
            assert again is not None and again.status == 200
            for _, w in held:
                w.close()

    run(scenario)


def test_ten_thousand_headers_get_431_json() -> None:
    async def scenario() -> None:
        async with grid() as g:
            extra = "".join(f"x-h{i}: v\r\n" for i in range(10_000))
            answer = await exchange(g.url, post("/v1/chat/completions", CHAT, extra))
            assert answer is not None and answer.status == 431
            assert answer.headers["content-type"].startswith("application/json")
            assert answer.json()["error"]["code"] == "request_header_fields_too_large"
            assert g.gw.client_errors.counts[Kind.HEADERS_TOO_LARGE] == 1

    run(scenario)


def test_a_one_mib_header_gets_431_json() -> None:
    async def scenario() -> None:
        async with grid() as g:
            extra = "x-big: " + "a" * (1 << 20) + "\r\n"
            answer = await exchange(g.url, post("/v1/chat/completions", CHAT, extra))
            assert answer is not None and answer.status == 431
            assert answer.json()["error"]["type"] == "invalid_request_error"

    run(scenario)


def test_garbage_instead_of_http_gets_400_json() -> None:
    async def scenario() -> None:
        async with grid() as g:
            answer = await exchange(g.url, b"\x16\x03\x01 not http at all\r\n\r\n")
            assert answer is not None and answer.status == 400
            assert answer.json()["error"]["code"] == "bad_request"

    run(scenario)


def test_client_errors_are_counted_always_but_logged_once_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> None:
        async with grid(error_log_interval_s=3600) as g:
            for _ in range(25):
                answer = await exchange(g.url, b"BAD\x00 / HTTP/1.1\r\n\r\n")
                assert answer is not None and answer.status == 400
            assert g.gw.client_errors.counts[Kind.BAD_REQUEST] == 25
            reg = g.gw.metrics.registry
            assert reg.get_sample_value("grid_route_client_errors_total", {"kind": "bad_request"})
            assert g.gw.client_errors.counts[Kind.BAD_REQUEST] == 25

    with caplog.at_level(logging.DEBUG):
        run(scenario)
    lines = [r for r in caplog.records if "bad_request" in r.getMessage()]
    assert len(lines) == 1
    assert not any(r.exc_info for r in caplog.records if r.name.startswith("aiohttp"))
