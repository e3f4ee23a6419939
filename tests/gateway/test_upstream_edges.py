"""Edge cases of the backend client, each found by a review as a failing test first.

Closing a pool while a connection is still being made, a probe on a saturated pool,
bodies cut by our own close or timeout, the read timer against our own backpressure,
101 and HEAD answers, trailers, a second unsolicited answer, and a fuzz of
cancellations and server failures that must never leak a slot of the pool's limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random

import pytest

from gridroute.gateway import upstream
from gridroute.gateway.backends import Backend
from gridroute.gateway.config import HealthConfig
from gridroute.gateway.health import HealthProber
from gridroute.gateway.routing import BackendSpec
from tests.gateway.harness import run
from tests.gateway.test_upstream import OK, body_of, pool, raw_server, read_request


def test_close_while_a_connect_is_in_flight() -> None:
    """Pool.close() (reload or shutdown) while a request is connecting."""

    async def handle(reader, writer) -> None:
        await read_request(reader)
        writer.write(OK)

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            t = asyncio.create_task(p.request("POST", "/", [], b"{}"))
            await asyncio.sleep(0)  # the task is now inside create_connection
            assert p.open_connections == 1
            await p.close(graceful=True)  # raises AttributeError: NoneType.abort
            with pytest.raises(upstream.UpstreamError):
                await t

    run(scenario)


def test_trailers_do_not_leak_into_the_next_answer() -> None:
    async def handle(reader, writer) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n"
            b"2\r\nok\r\n0\r\nX-T: 1\r\n\r\n"
        )
        await read_request(reader)
        writer.write(OK)

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            r1 = await p.request("POST", "/", [], b"{}")
            assert await body_of(r1) == b"ok"
            r2 = await p.request("POST", "/", [], b"{}")
            assert await body_of(r2) == b"ok"
            assert len(srv.peers) == 1
            assert r2.headers == [("Content-Length", "2")], r2.headers
            await p.close()

    run(scenario)


def test_a_hard_close_does_not_complete_a_close_delimited_body() -> None:
    async def handle(reader, writer) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\npart")
        await asyncio.sleep(5)
        writer.write(b" rest")

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            resp = await p.request("POST", "/", [], b"{}")
            assert await resp.readany() == b"part"
            await p.close()  # shutdown cuts answers in flight
            with pytest.raises(upstream.BodyError):
                await resp.readany()  # returns b"": a cut answer looks complete
            resp.release()

    run(scenario)


def test_head_answer_with_content_length_does_not_hang() -> None:
    async def handle(reader, writer) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n")
        await asyncio.sleep(5)

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url, read_timeout_s=1.0)
            resp = await p.request("HEAD", "/", [], b"")
            assert await asyncio.wait_for(body_of(resp), 0.5) == b""
            await p.close()

    run(scenario)


def test_a_shorter_read_timeout_on_a_reused_connection_is_honoured() -> None:
    """The first exchange leaves a timer an hour out; the second asks for 0.2 s. Were
    the old timer kept, the request would wait out the hour (the run's bound fails the
    test); honoured, it ends in the 0.2 s timeout. No clock is read here."""
    silent = asyncio.Event()

    async def handle(reader, writer) -> None:
        await read_request(reader)
        writer.write(OK)
        await read_request(reader)
        await silent.wait()  # silent until the test ends

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url, read_timeout_s=3600.0)
            assert await body_of(await p.request("POST", "/", [], b"{}")) == b"ok"
            with pytest.raises(upstream.ReadTimeout, match=r"for 0\.2 s"):
                await p.request("POST", "/", [], b"{}", read_timeout_s=0.2)
            assert len(srv.peers) == 1  # the same, reused connection
            silent.set()
            await p.close()

    run(scenario, timeout=20.0)


def test_backpressure_pause_is_not_backend_silence() -> None:
    size = 4 * 1024 * 1024

    async def handle(reader, writer) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        writer.write(b"x" * size)
        await writer.drain()
        await asyncio.sleep(5)

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url, read_timeout_s=0.3)
            resp = await p.request("POST", "/", [], b"{}")
            await asyncio.sleep(0.6)  # slow client: the gateway paused the backend
            assert len(await body_of(resp)) == size  # ReadTimeout: the backend was never silent
            await p.close()

    run(scenario)


def test_a_second_unsolicited_answer_is_not_merged_into_the_body() -> None:
    async def handle(reader, writer) -> None:
        await read_request(reader)
        writer.write(OK + b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc")
        await asyncio.sleep(1)

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            resp = await p.request("POST", "/", [], b"{}")
            await asyncio.sleep(0.1)
            assert await body_of(resp) == b"ok"
            await p.close()

    run(scenario)


def test_buffered_bytes_after_a_read_timeout_are_not_the_end() -> None:
    """_relay: `chunk = readany(); if up.at_eof(): write_eof(chunk)` -- must not end cleanly."""

    async def handle(reader, writer) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\npart")
        await asyncio.sleep(5)

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url, read_timeout_s=0.2)
            resp = await p.request("POST", "/", [], b"{}")
            await asyncio.sleep(0.5)  # the relay was blocked on a slow client's write
            assert await resp.readany() == b"part"
            assert not resp.at_eof(), "a timed-out answer reads as complete"
            resp.release()

    run(scenario)


def test_a_hard_close_with_a_connect_in_flight_wakes_waiters() -> None:
    async def handle(reader, writer) -> None:
        await read_request(reader)
        writer.write(OK)

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url, limit=1)
            t1 = asyncio.create_task(p.request("POST", "/", [], b"{}"))
            await asyncio.sleep(0)
            t2 = asyncio.create_task(p.request("POST", "/", [], b"{}"))
            await asyncio.sleep(0)  # t2 waits for the one slot
            await p.close()
            # t2 must learn the pool is closed
            with pytest.raises(upstream.UpstreamError):
                await asyncio.wait_for(t2, 1.0)
            t1.cancel()

    run(scenario)


def test_health_probe_of_a_saturated_backend_passes() -> None:
    async def handle(reader, writer) -> None:
        req = await read_request(reader)
        if b"/stream" in req:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n")
            await asyncio.sleep(5)
        else:
            writer.write(OK)

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url, limit=1)
            spec = BackendSpec("k", "s", "p", srv.url, None, 1.0, 2.0, 1, "/health", False)
            prober = HealthProber(HealthConfig(timeout_s=0.3), None, lambda: None)  # type: ignore[arg-type]
            resp = await p.request("POST", "/stream", [], b"{}")  # a long stream holds the slot
            ok, err = await prober._probe(Backend(spec, p))
            assert ok, err  # fails: the probe queues behind traffic and times out
            resp.release()
            await p.close()

    run(scenario)


def test_cancellation_anywhere_never_leaks_the_limit() -> None:
    async def handle(reader, writer) -> None:
        while True:
            await read_request(reader)
            await asyncio.sleep(random.random() * 0.01)
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n")
            await asyncio.sleep(random.random() * 0.01)
            writer.write(b"0\r\n\r\n")

    async def scenario() -> None:
        random.seed(1)
        async with raw_server(handle) as srv:
            p = pool(srv.url, limit=2)

            async def one() -> None:
                resp = await p.request("POST", "/", [], b"{}")
                try:
                    while await resp.readany():
                        pass
                finally:
                    resp.release()

            for _ in range(30):
                tasks = [asyncio.create_task(one()) for _ in range(10)]
                await asyncio.sleep(random.random() * 0.02)
                for t in tasks:
                    if random.random() < 0.5:
                        t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            await asyncio.sleep(0.05)
            assert p.open_connections <= 2
            assert not p._waiters
            await asyncio.wait_for(one(), 1.0)
            await p.close()

    run(scenario)


def test_a_204_and_a_100_keep_the_connection_reusable() -> None:
    async def handle(reader, writer) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n"
        )
        await read_request(reader)
        writer.write(OK)

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            for st, body in ((204, b""), (304, b""), (200, b"ok")):
                r = await asyncio.wait_for(p.request("POST", "/", [], b"{}"), 1)
                assert r.status == st
                assert await asyncio.wait_for(body_of(r), 1) == body
            assert len(srv.peers) == 1
            await p.close()

    run(scenario)


def test_tls_handshake_failure_is_connect_failed_and_frees_the_slot() -> None:
    async def scenario() -> None:
        async def on_conn(reader, writer) -> None:
            await reader.read(100)  # read the ClientHello, answer garbage
            writer.write(b"garbage garbage garbage\r\n\r\n")
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        p = pool(f"https://127.0.0.1:{port}", limit=1)
        for _ in range(3):
            with pytest.raises(upstream.ConnectFailed):
                await p.request("POST", "/", [], b"{}")
        assert p.open_connections == 0
        await p.close()
        server.close()

    run(scenario)


def test_close_during_connect_neither_raises_nor_leaks_the_socket() -> None:
    ended: list[bytes] = []

    async def handle(reader, writer) -> None:
        ended.append(await reader.read())  # b"" once the gateway closes its side

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            t = asyncio.create_task(p.request("POST", "/", [], b"{}"))
            await asyncio.sleep(0)  # t is inside create_connection
            await p.close()  # today: AttributeError 'NoneType' object has no attribute 'abort'
            with pytest.raises(upstream.UpstreamError):
                await t
            await asyncio.sleep(0.5)
            assert srv.open == 0 and ended == [b""], (srv.open, ended)  # today: socket leaked

    run(scenario)


def test_fuzz_cancellation_and_server_failures() -> None:
    async def handle(reader, writer) -> None:
        while True:
            await read_request(reader)
            r = random.random()
            await asyncio.sleep(random.random() * 0.005)
            if r < 0.1:
                return  # close before answering
            if r < 0.2:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
                return  # cut mid-body
            if r < 0.3:
                writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nabc")
                return
            if r < 0.35:
                writer.transport.abort()
                return
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n")
            await asyncio.sleep(random.random() * 0.005)
            writer.write(b"0\r\n\r\n")

    async def scenario() -> None:
        errors: list[dict] = []
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: errors.append(ctx))
        random.seed(2)
        async with raw_server(handle) as srv:
            p = pool(srv.url, limit=3, read_timeout_s=0.05)

            async def one() -> None:
                resp = await p.request("POST", "/", [], b"{}")
                try:
                    while await resp.readany():
                        await asyncio.sleep(random.random() * 0.003)
                finally:
                    resp.release()

            async def timed() -> None:
                async with asyncio.timeout(random.random() * 0.01):
                    await one()

            for _ in range(60):
                tasks = [asyncio.create_task(random.choice([one, timed])()) for _ in range(12)]
                await asyncio.sleep(random.random() * 0.01)
                for t in tasks:
                    if random.random() < 0.3:
                        t.cancel()
                res = await asyncio.gather(*tasks, return_exceptions=True)
                for x in res:
                    assert x is None or isinstance(
                        x, (upstream.UpstreamError, asyncio.CancelledError, TimeoutError)
                    ), repr(x)
            await asyncio.sleep(0.1)
            assert p.open_connections <= 3
            assert not p._waiters
            assert all(not c.lost for c in p._open), "a lost connection still counts"
            for _ in range(3):
                with contextlib.suppress(upstream.UpstreamError):
                    await asyncio.wait_for(one(), 1.0)
            await p.close()
        gc.collect()
        await asyncio.sleep(0.05)
        assert not errors, errors[:3]

    run(scenario, timeout=60)


def test_a_101_answer_is_a_clean_error_not_a_fatal_protocol_error() -> None:
    async def handle(reader, writer) -> None:
        await read_request(reader)
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\n\r\n\x81\x00"
        )
        await asyncio.sleep(1)

    async def scenario() -> None:
        errors: list[dict] = []
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: errors.append(ctx))
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            try:
                await p.request("POST", "/", [], b"{}")
            except upstream.UpstreamError as exc:
                got = exc
            assert isinstance(got, upstream.BodyError), repr(got)
            assert not errors, [e.get("message") for e in errors]
            await p.close()

    run(scenario)
