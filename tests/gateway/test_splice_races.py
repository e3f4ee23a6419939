"""Races on the data plane's two drivers (`dataplane/splice.py` and the task that
carries a run on, `Serving.carry_on`): a task cancelled before its first step (the
client's close already queued) never enters `drive`, so its `own.end` and
`run.finish` are settled by the task's done-callback; and the idle race's resend goes
on a new connection, once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gridroute.gateway.dataplane.answer import Serving
from tests.gateway.harness import run, running_grid
from tests.gateway.test_upstream import OK, Server, raw_server, read_request
from tests.inbound.rawhttp import connect, post, read_answer

CHAT = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


@pytest.fixture(autouse=True)
def on_the_data_plane() -> object:
    from tests.gateway import harness

    before = harness.listener_kind
    harness.listener_kind = "dataplane"
    yield
    harness.listener_kind = before


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
