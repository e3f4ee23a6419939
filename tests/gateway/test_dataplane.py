"""The data-plane listener's own seams: what it hands to aiohttp, on the same
connection, and what it serves itself between (the shared bounds and the proxy's
behaviour are the other gateway tests, which run against both listeners), then the
races between its two drivers (the callback path and the task that carries a run on)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from gridroute.gateway.dataplane.answer import Serving
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


# -- races between the data plane's two drivers (`dataplane/splice.py` and the task that
# carries a run on, `Serving.carry_on`) ---------------------------------------------


def _close_first(monkeypatch: pytest.MonkeyPatch, armed: list[bool]) -> None:
    """The client's close is processed (connection_lost queued) just before the task
    that carries the run on is created: as when the client's RST and the backend's
    event come in the same poll, the client's first."""
    orig = Serving.carry_on

    def carry_on(self: Any, work: Any, *rest: Any) -> None:
        if armed and armed[0]:
            armed[0] = False
            self.transport.abort()  # connection_lost: call_soon, ahead of the task's step
        orig(self, work, *rest)

    monkeypatch.setattr(Serving, "carry_on", carry_on)


def test_a_resend_whose_client_left_in_the_same_pass_settles_its_count(monkeypatch) -> None:
    box: list[Server] = []
    armed: list[bool] = []
    _close_first(monkeypatch, armed)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader, box[0])
        writer.write(OK)
        await writer.drain()
        await read_request(reader, box[0])  # dropped: the idle race
        writer.close()

    async def scenario() -> None:
        async with raw_server(handle) as server, running_grid({"a": server.url}) as g:
            box.append(server)
            reader, writer = await connect(g.url)
            writer.write(post("/v1/chat/completions", CHAT))
            first = await read_answer(reader)
            assert first is not None and first.status == 200
            armed.append(True)
            writer.write(post("/v1/chat/completions", CHAT))  # spliced; then the resend
            await asyncio.sleep(0.5)
            assert not armed[0]  # the resend was handed to a task
            assert g.gw.backends.by_key["a/a"].pool.stale == 1
            assert g.in_flight() == 0, "own.start without own.end"
            writer.close()

    run(scenario)


def test_a_task_cancelled_before_its_first_step_is_counted_499(monkeypatch) -> None:
    armed: list[bool] = []
    _close_first(monkeypatch, armed)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(OK)
            await writer.drain()

    async def scenario() -> None:
        async with raw_server(handle) as server, running_grid({"a": server.url}) as g:
            _reader, writer = await connect(g.url)
            armed.append(True)
            writer.write(post("/v1/chat/completions", CHAT))  # no idle connection: a task
            await asyncio.sleep(0.3)
            assert not armed[0]
            answered = dict(g.gw.metrics.answered)
            assert answered.get(499, 0) == 1, answered  # the old path counted a 499
            writer.close()

    run(scenario)


@pytest.mark.parametrize("listener", ["aiohttp", "dataplane"])
def test_idle_race_resend_goes_on_a_new_connection_once(listener: str) -> None:
    """Two kept-alive connections, both closed by the server at their next request (a
    backend restarted): the request is sent once more, on a *new* connection, not on
    the other stale idle one (which would make three sends), on either listener."""
    from tests.gateway import harness

    harness.listener_kind = listener  # the autouse fixture puts it back
    box: list[Server] = []
    gate = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        n = len(box[0].peers)
        await read_request(reader, box[0])
        if n <= 2:  # the two warm-up connections: one answer, then close at the next
            await gate.wait()
            writer.write(OK)
            await writer.drain()
            await read_request(reader, box[0])
            writer.close()
            return
        writer.write(OK)
        await writer.drain()

    async def scenario() -> None:
        async with raw_server(handle) as server, running_grid({"a": server.url}) as g:
            box.append(server)
            pool = g.gw.backends.by_key["a/a"].pool

            async def one() -> int:
                reader, writer = await connect(g.url)
                writer.write(post("/v1/chat/completions", CHAT))
                a = await read_answer(reader)
                writer.close()
                return 0 if a is None else a.status

            t = [asyncio.create_task(one()) for _ in range(2)]
            await asyncio.sleep(0.2)
            gate.set()
            assert await asyncio.gather(*t) == [200, 200]
            assert pool.idle_connections == 2
            assert await one() == 200
            assert len(server.requests) == 4, (len(server.requests), pool.stale)
            assert pool.stale == 1

    run(scenario)
