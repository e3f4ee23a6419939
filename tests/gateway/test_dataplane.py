"""The data-plane listener's own seams: what it hands to aiohttp, on the same
connection, and what it serves itself between (the shared bounds and the proxy's
behaviour are the other gateway tests, which run against both listeners)."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.gateway.harness import fake, run, running_grid
from tests.gateway.test_upstream import OK, Server, raw_server, read_request
from tests.inbound.rawhttp import closed, connect, post, read_answer

CHAT = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


@pytest.fixture(autouse=True)
def on_the_data_plane() -> object:
    from tests.gateway import harness

    before = harness.listener_kind
    harness.listener_kind = "dataplane"
    yield
    harness.listener_kind = before


def test_a_kept_alive_connection_is_handed_to_aiohttp_at_its_first_other_request() -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a")}) as g:
            assert g.plane is not None
            reader, writer = await connect(g.url)
            writer.write(post("/v1/chat/completions", CHAT))
            first = await read_answer(reader)
            assert first is not None and first.status == 200
            assert first.headers["x-grid-site"] == "a"
            assert len(g.plane.conns) == 1  # served on the data plane
            writer.write(b"GET /v1/models HTTP/1.1\r\nHost: t\r\n\r\n")
            models = await read_answer(reader)
            assert models is not None and models.status == 200
            assert [m["id"] for m in models.json()["data"]] == ["m"]
            assert not g.plane.conns  # aiohttp's now
            writer.write(post("/v1/chat/completions", CHAT))
            again = await read_answer(reader)
            assert again is not None and again.status == 200
            assert again.headers["x-grid-site"] == "a"
            assert g.gw.guard.open == 1  # counted once, by its owner
            writer.close()
            for _ in range(100):
                if g.gw.guard.open == 0:
                    break
                await asyncio.sleep(0.01)
            assert g.gw.guard.open == 0

    run(scenario)


def test_pipelined_requests_are_answered_in_order() -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a")}) as g:
            reader, writer = await connect(g.url)
            bad = post("/v1/chat/completions", b'{"messages":[]}')
            chat = post("/v1/chat/completions", CHAT)
            writer.write(chat + bad + chat)
            statuses = []
            for _ in range(3):
                answer = await read_answer(reader)
                assert answer is not None
                statuses.append(answer.status)
            assert statuses == [200, 400, 200]
            writer.close()

    run(scenario)


def test_a_chunked_body_goes_to_aiohttp_and_is_routed_there() -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a")}) as g:
            assert g.plane is not None
            reader, writer = await connect(g.url)
            head = (
                "POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\n"
                "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            chunk = b"%x\r\n%s\r\n0\r\n\r\n" % (len(CHAT), CHAT)
            writer.write(head.encode() + chunk)
            answer = await read_answer(reader)
            assert answer is not None and answer.status == 200
            assert answer.headers["x-grid-site"] == "a"
            assert not g.plane.conns
            writer.close()

    run(scenario)


def test_client_grid_headers_are_dropped_and_connection_close_is_honoured() -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a")}) as g:
            reader, writer = await connect(g.url)
            extra = "x-grid-site: forged\r\nConnection: close\r\n"
            writer.write(post("/v1/chat/completions", CHAT, extra))
            answer = await read_answer(reader)
            assert answer is not None and answer.status == 200
            assert answer.headers["x-grid-site"] == "a"
            assert answer.headers["connection"] == "close"
            assert json.loads(answer.body)["object"] == "chat.completion"
            assert await closed(reader)
            writer.close()

    run(scenario)


def test_a_kept_alive_connection_closed_as_the_request_arrives_is_sent_again() -> None:
    """The idle race on the callback path (`dataplane/splice.py`): the backend closes
    the kept-alive connection as the second request reaches it, before any byte of an
    answer; the same attempt goes once more on a new connection, and the client never
    sees it."""

    box: list[Server] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader, box[0])
        writer.write(OK)
        await writer.drain()
        await read_request(reader, box[0])  # the next one on this connection: dropped
        writer.close()

    async def scenario() -> None:
        async with raw_server(handle) as server, running_grid({"a": server.url}) as g:
            box.append(server)
            pool = g.gw.backends.by_key["a/a"].pool
            reader, writer = await connect(g.url)
            for _ in range(2):
                writer.write(post("/v1/chat/completions", CHAT))
                answer = await read_answer(reader)
                assert answer is not None and answer.status == 200
                assert answer.body == b"ok"
            assert pool.stale == 1  # sent again once
            assert len(server.requests) == 3
            assert server.peers and len(server.peers) == 2
            assert g.in_flight() == 0
            writer.close()

    run(scenario)


def test_a_slow_client_on_the_callback_path_holds_the_backend_back() -> None:
    """Backpressure on the callback path: while the client reads nothing, the backend's
    writes stall (the gateway stopped reading it) instead of the answer piling up in
    the gateway; then the whole body arrives."""
    size = 64 * 1024 * 1024
    sent: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK)  # the first request opens the kept-alive connection
        await writer.drain()
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        block = bytes(range(256)) * 1024
        for _ in range(size // len(block)):
            writer.write(block)
            await writer.drain()
            sent.append(len(block))

    async def scenario() -> None:
        async with raw_server(handle) as server, running_grid({"a": server.url}) as g:
            reader, writer = await connect(g.url)
            writer.write(post("/v1/chat/completions", CHAT))
            first = await read_answer(reader)
            assert first is not None and first.status == 200
            writer.write(post("/v1/chat/completions", CHAT))
            await asyncio.sleep(0.5)  # read nothing
            stalled = sum(sent)
            assert stalled < size, stalled  # the kernel's socket buffers, not the body
            assert g.plane is not None
            (conn,) = g.plane.conns
            assert conn.splice is not None and conn.splice.relaying  # the callback path
            assert conn.transport.get_write_buffer_size() <= 1024 * 1024
            await asyncio.sleep(0.2)
            assert sum(sent) == stalled  # held back, not trickling
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200")
            got = 0
            while got < size:
                chunk = await reader.read(1 << 20)
                assert chunk
                got += len(chunk)
            assert got == size
            assert g.in_flight() == 0
            writer.close()

    run(scenario)
