"""The gateway's backend client (`gridroute.gateway.upstream`) against raw loopback servers.

The servers here write exact bytes, so each test pins one thing the proxy relies on:
keep-alive reuse, the connection limit, backpressure, the three ways a body ends,
timeouts before and after the headers, and what closing a pool does to answers in
flight.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from gridroute.gateway import upstream
from gridroute.gateway.backends import ssl_context
from gridroute.gateway.config import TLSConfig
from gridroute.gateway.upstream import Pool
from gridroute.operator.certs import init_certs
from gridroute.operator.config import TLSFiles
from gridroute.operator.tls import server_context
from tests.gateway.backends import closed_port
from tests.gateway.harness import eventually, run

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


class Server:
    """A raw TCP server on loopback that records its connections."""

    def __init__(self) -> None:
        self.url = ""
        self.peers: list[Any] = []
        self.open = 0
        self.most_open = 0
        self.requests: list[bytes] = []


@contextlib.asynccontextmanager
async def raw_server(handle: Handler) -> AsyncIterator[Server]:
    srv = Server()
    writers: list[asyncio.StreamWriter] = []

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        srv.peers.append(writer.get_extra_info("peername"))
        writers.append(writer)
        srv.open += 1
        srv.most_open = max(srv.most_open, srv.open)
        try:
            await handle(reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            srv.open -= 1
            writer.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    srv.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        yield srv
    finally:
        server.close()
        for w in writers:
            w.close()


async def read_request(reader: asyncio.StreamReader, srv: Server | None = None) -> bytes:
    """One whole request (head and Content-Length body)."""
    head = await reader.readuntil(b"\r\n\r\n")
    n = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            n = int(line.split(b":")[1])
    raw = head + await reader.readexactly(n)
    if srv is not None:
        srv.requests.append(raw)
    return raw


def pool(url: str, **kw: Any) -> Pool:
    args: dict[str, Any] = {
        "ssl_context": None,
        "server_hostname": None,
        "limit": 8,
        "connect_timeout_s": 1.0,
        "read_timeout_s": 2.0,
    }
    args.update(kw)
    return Pool(url, **args)


async def body_of(resp: upstream.Response) -> bytes:
    out = bytearray()
    while chunk := await resp.readany():
        out += chunk
    resp.release()
    return bytes(out)


def test_the_request_leaves_as_given_with_only_host_and_length_added() -> None:
    async def scenario() -> None:
        srv_ref: list[Server] = []

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader, srv_ref[0])
            writer.write(OK)

        async with raw_server(handle) as srv:
            srv_ref.append(srv)
            p = pool(srv.url + "/prefix/")
            resp = await p.request("POST", "/v1/x?y=1", [("A", "b"), ("a", "c")], b"abc")
            assert (resp.status, await body_of(resp)) == (200, b"ok")
            port = srv.url.rsplit(":", 1)[1]
            assert srv.requests[0] == (
                b"POST /prefix/v1/x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:" + port.encode() + b"\r\n"
                b"A: b\r\na: c\r\nContent-Length: 3\r\n\r\nabc"
            )
            await p.close()

    run(scenario)


def test_keep_alive_reuses_one_connection() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            writer.write(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n"
            )

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            for _ in range(5):
                resp = await p.request("POST", "/", [], b"{}")
                assert resp.chunked and resp.content_length is None
                assert await body_of(resp) == b"ok"
            assert len(srv.peers) == 1
            assert p.open_connections == 1
            await p.close()

    run(scenario)


def test_the_pool_never_opens_more_than_its_limit() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            await read_request(reader)
            await asyncio.sleep(0.05)
            writer.write(OK)

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url, limit=2)

            async def one() -> bytes:
                return await body_of(await p.request("POST", "/", [], b"{}"))

            assert await asyncio.gather(*(one() for _ in range(8))) == [b"ok"] * 8
            assert srv.most_open == 2
            assert p.open_connections == 2
            await p.close()

    run(scenario)


def test_a_fast_large_body_waits_in_the_socket_not_in_memory() -> None:
    size = 32 * 1024 * 1024

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        block = bytes(range(256)) * 4096  # 1 MiB
        for _ in range(size // len(block)):
            writer.write(block)
            await writer.drain()

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            resp = await p.request("POST", "/", [], b"{}")
            await asyncio.sleep(0.5)  # the reader is slow: nothing is read for a while
            # Paused past HIGH_WATER; at most one more socket read (256 KiB) lands.
            assert resp.buffered <= upstream.HIGH_WATER + 256 * 1024, resp.buffered
            got = await body_of(resp)
            assert len(got) == size
            assert got[:512] == bytes(range(256)) * 2
            await p.close()

    run(scenario)


def test_a_body_delimited_by_the_close_ends_there() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nhel")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"lo")

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            resp = await p.request("POST", "/", [], b"{}")
            assert await body_of(resp) == b"hello"
            assert p.open_connections == 0  # not kept: the server closes it
            await p.close()

    run(scenario)


def test_an_idle_connection_the_server_closed_is_not_reused() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK)  # keep-alive by HTTP/1.1's default, then closed after 50 ms

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            assert await body_of(await p.request("POST", "/", [], b"{}")) == b"ok"
            await eventually(lambda: p.open_connections == 0)
            assert await body_of(await p.request("POST", "/", [], b"{}")) == b"ok"
            assert len(srv.peers) == 2
            await p.close()

    run(scenario)


def test_a_refused_connection_is_connect_failed() -> None:
    async def scenario() -> None:
        p = pool(closed_port())
        with pytest.raises(upstream.ConnectFailed):
            await p.request("POST", "/", [], b"{}")
        assert p.open_connections == 0
        await p.close()

    run(scenario)


def test_a_connect_that_hangs_is_connect_timeout() -> None:
    class SlowLoop:
        """The running loop, except that connecting never completes."""

        def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
            self._loop = loop

        def __getattr__(self, name: str) -> Any:
            return getattr(self._loop, name)

        async def create_connection(self, *a: Any, **kw: Any) -> Any:
            await asyncio.sleep(60)

    async def scenario() -> None:
        p = pool("http://127.0.0.1:9", connect_timeout_s=0.2)
        p.loop = SlowLoop(p.loop)  # type: ignore[assignment]
        with pytest.raises(upstream.ConnectTimeout):
            await p.request("POST", "/", [], b"{}")
        assert p.open_connections == 0
        await p.close()

    run(scenario)


def test_closed_before_the_answer_is_disconnected() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)  # and close without a word

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            with pytest.raises(upstream.Disconnected):
                await p.request("POST", "/", [], b"{}")
            assert upstream.describe(upstream.Disconnected()) == "disconnected"
            await p.close()

    run(scenario)


def test_silence_before_the_headers_and_between_chunks_is_a_read_timeout() -> None:
    ended: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        req = await read_request(reader)
        if b"/quiet-body" in req:
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n")
        ended.append(await reader.read())  # silent until the client hangs up

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url, read_timeout_s=0.2)
            with pytest.raises(upstream.ReadTimeout):
                await p.request("POST", "/quiet-head", [], b"{}")
            resp = await p.request("POST", "/quiet-body", [], b"{}")
            assert await resp.readany() == b"ok"
            with pytest.raises(upstream.ReadTimeout):
                await resp.readany()
            resp.release()
            await eventually(lambda: ended == [b"", b""])  # both connections were closed
            assert p.open_connections == 0
            await p.close()

    run(scenario)


def test_an_interim_100_answer_is_skipped() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n" + OK)

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            resp = await p.request("POST", "/", [], b"{}")
            assert resp.status == 200
            assert resp.headers == [("Content-Length", "2")]
            assert await body_of(resp) == b"ok"
            await p.close()

    run(scenario)


def test_a_malformed_answer_is_an_error_not_a_hang() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"SMTP ready\r\n\r\n")
        await asyncio.sleep(5)

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            with pytest.raises(upstream.BodyError):
                await p.request("POST", "/", [], b"{}")
            assert p.open_connections == 0
            await p.close()

    run(scenario)


def test_releasing_an_unfinished_answer_closes_its_connection() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n")
        await writer.drain()
        assert await reader.read() == b""  # the client went away: stop generating
        srv_ended.append(b"eof")

    srv_ended: list[bytes] = []

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            resp = await p.request("POST", "/", [], b"{}")
            assert await resp.readany() == b"ok"
            resp.release()
            await eventually(lambda: srv_ended == [b"eof"])
            assert p.open_connections == 0
            await p.close()

    run(scenario)


def test_a_graceful_close_lets_answers_in_flight_finish() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n")
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.write(b"5\r\n done\r\n0\r\n\r\n")

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            resp = await p.request("POST", "/", [], b"{}")
            await p.close(graceful=True)  # a reload replaced this backend
            assert await body_of(resp) == b"ok done"
            assert p.open_connections == 0  # closed on release, not pooled
            with pytest.raises(upstream.ConnectFailed):
                await p.request("POST", "/", [], b"{}")

    run(scenario)


def test_a_hard_close_cuts_answers_in_flight() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n")
        await asyncio.sleep(5)

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            resp = await p.request("POST", "/", [], b"{}")
            assert await resp.readany() == b"ok"
            await p.close()
            with pytest.raises(upstream.BodyError):
                await resp.readany()
            resp.release()

    run(scenario)


def test_a_bad_backend_url_is_refused_with_its_value() -> None:
    async def scenario() -> None:
        with pytest.raises(ValueError, match="ftp://x"):
            pool("ftp://x")

    run(scenario)


def test_a_kept_alive_connection_closed_before_answering_is_resent_on_a_new_one() -> None:
    """The idle-close race: the server drops a kept-alive connection as the request
    leaves on it. The request goes once more on a new connection; no error."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK)
        await read_request(reader)  # the second request on this connection: dropped

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            assert await body_of(await p.request("POST", "/", [], b"{}")) == b"ok"
            assert await body_of(await p.request("POST", "/", [], b"{}")) == b"ok"
            assert (len(srv.peers), p.stale) == (2, 1)
            await p.close()

    run(scenario)


def test_a_new_connection_closed_before_answering_is_not_resent() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            with pytest.raises(upstream.Disconnected):
                await p.request("POST", "/", [], b"{}")
            assert (len(srv.peers), p.stale) == (1, 0)
            await p.close()

    run(scenario)


def test_a_probe_past_the_limit_does_not_leave_an_extra_connection() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            req = await read_request(reader)
            if b"/stream" in req:
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n")
                await reader.read()
                return
            writer.write(OK)

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url, limit=1)
            stream = await p.request("POST", "/stream", [], b"{}")
            probe = await p.request("GET", "/health", [], b"", over_limit=True)
            assert await body_of(probe) == b"ok"
            assert p.open_connections == 1  # the probe's connection was closed, not kept
            stream.release()
            await p.close()

    run(scenario)


def test_mutual_tls_checks_the_name_it_is_told_to(tmp_path: Path) -> None:
    """`tls.server_name` is the name verified in the backend's certificate (here the
    certificate names `localhost` and 127.0.0.1, not `elsewhere.example`)."""
    init_certs(tmp_path, ["a"])
    files = TLSFiles(
        cert=tmp_path / "a/server.crt", key=tmp_path / "a/server.key", ca=tmp_path / "ca.crt"
    )
    client = TLSConfig(
        ca_file=str(tmp_path / "ca.crt"),
        cert_file=str(tmp_path / "a/client.crt"),
        key_file=str(tmp_path / "a/client.key"),
    )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK)

    async def scenario() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_context(files))
        url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        try:
            good = pool(url, ssl_context=ssl_context(client), server_hostname="localhost")
            assert await body_of(await good.request("POST", "/", [], b"{}")) == b"ok"
            bad = pool(url, ssl_context=ssl_context(client), server_hostname="elsewhere.example")
            with pytest.raises(upstream.ConnectFailed, match="certificate"):
                await bad.request("POST", "/", [], b"{}")
            assert bad.open_connections == 0
            await good.close()
            await bad.close()
        finally:
            server.close()

    run(scenario)


def test_a_kept_alive_connection_closed_after_a_while_is_not_resent() -> None:
    """Past `RESEND_WITHIN_S` the close may follow work on the request: no resend."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        writer.write(OK)
        await read_request(reader)
        await asyncio.sleep(upstream.RESEND_WITHIN_S + 0.2)  # worked on it, then died

    async def scenario() -> None:
        async with raw_server(handle) as srv:
            p = pool(srv.url)
            assert await body_of(await p.request("POST", "/", [], b"{}")) == b"ok"
            with pytest.raises(upstream.Disconnected):
                await p.request("POST", "/", [], b"{}")
            assert (len(srv.peers), p.stale) == (1, 0)
            await p.close()

    run(scenario)
