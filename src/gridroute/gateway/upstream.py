"""A lean HTTP/1.1 client for the request path: one keep-alive pool per backend.

Why not aiohttp's client here: profiled under load, aiohttp's `ClientSession` (request
building, connector, timers, response objects) was about a third of the gateway's CPU
per request, more than the routing decision and the server side together. A proxy
needs little of it: write one request (head and body in one send), get the status,
headers and body as they arrive with backpressure, reuse keep-alive connections,
bound the connect and each silence, speak (mutual) TLS. Parsing is `httptools` (llhttp,
the parser uvicorn uses); this module is the pool, the flow control and the timers.

Errors are this module's own (`UpstreamError` and subclasses), split by what the
gateway does with them: before the answer's headers (`ConnectFailed`, `ConnectTimeout`,
`Disconnected`) a request may be retried elsewhere; a `ReadTimeout` is a 504; a
`BodyError` after the headers cuts the client.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from urllib.parse import urlsplit

import httptools

HIGH_WATER = 64 * 1024
"""Body bytes buffered before the backend socket is paused (backpressure); reading
resumes once the relay has taken what is buffered."""
KEEPALIVE_S = 30.0
"""An idle pooled connection older than this is closed rather than reused (servers
close theirs too: uvicorn after 5 s; a closed one leaves the pool when it closes)."""

RESEND_WITHIN_S = 1.0
"""A kept-alive connection that closes this soon after the request left, before any
byte of the answer, gets the request once more on a new connection (the idle race)."""


class UpstreamError(Exception):
    """Any failure talking to a backend."""


class ConnectFailed(UpstreamError):
    """Could not connect: refused, unreachable, or the TLS handshake failed."""


class ConnectTimeout(UpstreamError):
    """No connection within the backend's `connect_timeout_s`."""


class Disconnected(UpstreamError):
    """The connection closed before the answer's headers: what a backend going away
    (or a keep-alive connection it closed as the request left) looks like."""


class Reset(Disconnected):
    """The connection was reset (not closed cleanly) before the answer's headers."""


class ReadTimeout(UpstreamError):
    """The backend stayed silent for `read_timeout_s` (before the headers, or between
    two pieces of the body)."""


class BodyError(UpstreamError):
    """The answer broke after its headers: cut short or malformed."""


class Response:
    """One answer: status and headers once they are in, then the body as it arrives.

    The body is read with `read_nowait` / `readany` (a bounded buffer: past
    `HIGH_WATER` the backend socket is paused until the reader catches up), and must
    be followed by `release`, which puts the connection back in its pool when the
    answer was complete and the server keeps it alive, and closes it otherwise (so an
    abandoned stream stops its backend generating).
    """

    __slots__ = (
        "_buf",
        "_conn",
        "_exc",
        "_headers_done",
        "_paused",
        "_size",
        "_waiter",
        "chunked",
        "complete",
        "content_length",
        "headed",
        "headers",
        "keep_alive",
        "reason",
        "status",
    )

    def __init__(self, conn: _Conn, headers_done: asyncio.Future[None] | None) -> None:
        self._conn = conn
        self._headers_done = headers_done
        """Set when the headers are in (None: a subclass that is told by `_headers_in`)."""
        self.headed = False
        """The answer's status and headers are in."""
        self._buf: deque[bytes] = deque()
        self._size = 0
        self._exc: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._paused = False
        self.status = 0
        self.reason = ""
        self.headers: list[tuple[str, str]] = []
        """The answer's headers in order, as sent (decoded as aiohttp decodes them)."""
        self.content_length: int | None = None
        self.chunked = False
        self.complete = False
        """The whole body has arrived (it may still sit in the buffer)."""
        self.keep_alive = False

    # -- reading (the gateway's side) ------------------------------------------------

    @property
    def buffered(self) -> int:
        """Body bytes received and not read yet (bounded by backpressure)."""
        return self._size

    def is_eof(self) -> bool:
        """Everything has arrived (possibly still buffered), without error."""
        return self.complete and self._exc is None

    def at_eof(self) -> bool:
        """Everything has arrived and been read."""
        return self.complete and self._exc is None and not self._buf

    def read_nowait(self) -> bytes:
        """Everything buffered now (b"" if nothing is)."""
        buf = self._buf
        if not buf:
            return b""
        data = buf.popleft() if len(buf) == 1 else b"".join(buf)
        buf.clear()
        self._size = 0
        if self._paused:
            self._resume()
        return data

    async def readany(self) -> bytes:
        """The next bytes of the body (all that is buffered), or b"" at its end.

        Raises the error that ended the body early (`BodyError`, `ReadTimeout`)."""
        while not self._buf:
            if self._exc is not None:
                raise self._exc
            if self.complete:
                return b""
            waiter = self._waiter = self._conn.loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None
        return self.read_nowait()

    def release(self) -> None:
        """Back to the pool if complete and reusable, else close the connection."""
        conn = self._conn
        if conn.resp is not self:
            return
        if not (self.complete and self.keep_alive and self._exc is None and not conn.lost):
            self.drop()
            return
        conn.resp = None
        conn.timer_s = None
        if self._paused:
            self._resume()
        conn.pool.put_back(conn)

    def drop(self) -> None:
        """Close the connection now if this exchange still holds it (an answer left
        half-way is never reused)."""
        conn = self._conn
        if conn.resp is not self:
            return
        conn.resp = None
        conn.timer_s = None
        conn.close()

    # -- feeding (the connection's side) ---------------------------------------------
    # `_headers_in`, `_feed`, `_ended`, `_fail` and `_flush` are what the connection
    # tells its exchange; the data plane's `Splice` overrides them to write the answer
    # to its client as it is parsed, with no reader and no future in between.

    def _headers_in(self) -> None:
        """The status and headers are in."""
        self.headed = True
        hd = self._headers_done
        if hd is not None and not hd.done():
            hd.set_result(None)

    def _ended(self) -> None:
        """The whole body is in (`complete` and `keep_alive` set)."""
        self._wake()

    def _flush(self) -> None:
        """The end of one read from the socket (every callback of it has run)."""

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _feed(self, data: bytes) -> None:
        self._buf.append(data)
        self._size += len(data)
        if self._size > HIGH_WATER and not self._paused and not self.complete:
            self._paused = True
            self._conn.transport.pause_reading()
        self._wake()

    def _resume(self) -> None:
        self._paused = False
        self._conn.last = self._conn.loop.time()  # paused by us: not the backend's silence
        if not self._conn.lost:
            self._conn.transport.resume_reading()

    def _fail(self, exc: BaseException) -> None:
        """End the exchange with `exc`: before the headers it is the request's error,
        after them the body's."""
        if self._exc is not None or self.complete:
            return
        self._exc = exc
        hd = self._headers_done
        if hd is not None and not hd.done():
            hd.set_exception(exc)
        self._wake()


class _Conn(asyncio.Protocol):
    """One connection to a backend, and the `httptools` callbacks of its parser."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.loop = pool.loop
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.parser = httptools.HttpResponseParser(self)
        self.resp: Response | None = None
        self.lost = False
        self.idle_since = 0.0
        self.last = 0.0
        """Loop time of the last bytes received (for the lazy read timer)."""
        self.timer_s: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.head = False
        self.reused = False
        """Taken from the idle pool (it carried an earlier exchange)."""
        """The exchange is a HEAD: its answer has no body whatever its headers say."""

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if self.lost:  # the pool closed this connection while it was connecting
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        resp = self.resp
        if resp is None:  # bytes nobody asked for: this connection can't be trusted
            self.close()
            return
        self.last = self.loop.time()
        try:
            self.parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            resp._fail(BodyError(f"malformed answer from the backend: {exc}"))
            self.close()
        resp._flush()

    def eof_received(self) -> bool | None:
        return None  # close the transport; connection_lost says what it meant

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._cancel_timer()
        self.pool.forget(self)
        resp = self.resp
        if resp is None or resp.complete or resp._exc is not None:
            return
        if resp.headed:
            if resp.content_length is None and not resp.chunked and exc is None:
                resp.complete = True  # a body delimited by the close itself
                resp._ended()
                resp._flush()
            else:
                resp._fail(BodyError("the backend closed the connection mid-answer"))
        elif exc is not None:
            resp._fail(Reset(f"connection reset before the answer: {exc}"))
        else:
            resp._fail(Disconnected("the backend closed the connection before answering"))

    # -- httptools callbacks ----------------------------------------------------------

    def on_message_begin(self) -> None:
        resp = self.resp
        if resp is not None and resp.complete:  # a second answer to one request
            self.close()  # never reused; the callbacks below ignore it

    def on_status(self, status: bytes) -> None:
        if self.resp is not None and not self.resp.complete:
            self.resp.reason = status.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        resp = self.resp
        if resp is None or resp.complete:
            return
        k = name.decode("utf-8", "surrogateescape")
        v = value.decode("utf-8", "surrogateescape")
        resp.headers.append((k, v))
        lk = k.lower()
        if lk == "content-length":
            try:
                resp.content_length = int(v)
            except ValueError:
                resp.content_length = None
        elif lk == "transfer-encoding" and "chunked" in v.lower():
            resp.chunked = True

    def on_headers_complete(self) -> None:
        resp = self.resp
        if resp is None or resp.complete:
            return
        status = self.parser.get_status_code()
        if status < 200:  # an interim answer (100 Continue): the real one follows
            resp.headers.clear()
            resp.content_length = None
            resp.chunked = False
            return
        resp.status = status
        if self.head:  # httptools cannot skip the body: end here, never reuse
            resp.complete = True
            self.timer_s = None
        resp._headers_in()

    def on_body(self, body: bytes) -> None:
        resp = self.resp
        if resp is not None and not resp.complete:
            resp._feed(body)

    def on_message_complete(self) -> None:
        resp = self.resp
        if resp is None or resp.status == 0 or resp.complete:
            return
        resp.keep_alive = self.parser.should_keep_alive()
        resp.complete = True
        self.timer_s = None
        resp._ended()

    # -- timers and closing -----------------------------------------------------------

    def arm(self, timeout_s: float) -> None:
        """Fail the current exchange after `timeout_s` of silence, checked lazily: a
        chunk only stores the loop time; the timer fires at most once per period and
        re-arms for what is left (no cancel + re-arm per chunk)."""
        self.last = now = self.loop.time()
        self.timer_s = timeout_s
        t = self._timer
        if t is not None and t.when() > now + timeout_s:  # left by a longer exchange
            t.cancel()
            t = self._timer = None
        if t is None:
            self._timer = self.loop.call_at(now + timeout_s, self._check)

    def _check(self) -> None:
        self._timer = None
        timeout_s = self.timer_s
        resp = self.resp
        if timeout_s is None or resp is None or resp.complete:
            return
        if resp._paused:  # we stopped reading (slow client): not the backend's silence
            self.last = self.loop.time()
        due = self.last + timeout_s
        if self.loop.time() < due:
            self._timer = self.loop.call_at(due, self._check)
            return
        resp._fail(ReadTimeout(f"no data from the backend for {timeout_s} s"))
        self.close()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        """Drop the connection now (an abandoned answer must stop its backend)."""
        self._cancel_timer()
        if not self.lost:
            self.lost = True
            resp = self.resp
            if resp is not None and resp.headed:
                resp._fail(BodyError("the connection was closed mid-answer"))
            if self.transport is not None:  # None: still connecting (connection_made aborts)
                self.transport.abort()
        self.pool.forget(self)


class Pool:
    """Keep-alive connections to one backend, at most `limit` open at once.

    A request takes the most recently used idle connection (the least likely to have
    been closed by the server), else opens one, else waits for one to come back.
    """

    def __init__(
        self,
        url: str,
        *,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None,
        limit: int,
        connect_timeout_s: float,
        read_timeout_s: float | None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"backend URL must be http(s)://host[:port][/path], got {url!r}")
        tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if tls else 80)
        self.prefix = parts.path.rstrip("/")
        default_port = self.port == (443 if tls else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default_port else f"{host}:{self.port}"
        self.ssl = (
            ssl_context
            if ssl_context is not None
            else (ssl.create_default_context() if tls else None)
        )
        self.server_hostname = server_hostname if self.ssl is not None else None
        self.limit = limit if limit > 0 else 1 << 62
        """Most connections open at once (0 asked: unbounded)."""
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.loop = asyncio.get_running_loop()
        self._idle: list[_Conn] = []
        self._open: set[_Conn] = set()
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self._starts: dict[tuple[str, str], bytes] = {}
        self.stale = 0
        """Requests sent again because a kept-alive connection closed before answering."""

    # -- the request ------------------------------------------------------------------

    async def request(
        self,
        method: str,
        path_qs: str,
        headers: list[tuple[str, str]] | bytes,
        body: bytes,
        read_timeout_s: float | None = None,
        *,
        over_limit: bool = False,
        resend: bool = False,
    ) -> Response:
        """Send one request; return once the answer's status and headers are in.

        `read_timeout_s` (default: the pool's) bounds the wait for the headers and each
        gap in the body. On an error or cancellation before this returns, the
        connection is closed (never reused half-way through an exchange).

        A kept-alive connection that closes before any byte of the answer is, most
        often, one the server closed as idle just as the request left (uvicorn, behind
        vLLM and SGLang, closes idle connections after 5 s): the request is sent once
        more on a new connection, as the gateway would retry it elsewhere anyway, if the
        close came within `RESEND_WITHIN_S` (the race shows within a round trip; a
        close after longer may follow work done on the request)."""
        if resend:  # the idle race's second send, its first made by the data plane's `Splice`
            return await self._resend(method, path_qs, headers, body, read_timeout_s, over_limit)
        conn = await self._acquire(over_limit)
        if not conn.reused:
            return await self._exchange(conn, method, path_qs, headers, body, read_timeout_s)
        sent = self.loop.time()
        try:
            return await self._exchange(conn, method, path_qs, headers, body, read_timeout_s)
        except Disconnected:
            if self.loop.time() - sent > RESEND_WITHIN_S:
                raise  # it had time to be worked on: not the idle race
            self.stale += 1
        return await self._resend(method, path_qs, headers, body, read_timeout_s, over_limit)

    async def _resend(
        self,
        method: str,
        path_qs: str,
        headers: list[tuple[str, str]] | bytes,
        body: bytes,
        read_timeout_s: float | None,
        over_limit: bool,
    ) -> Response:
        """The idle race's second send: on a new connection while under the limit (an
        idle one may be as stale as the first), else the next one free."""
        if len(self._open) < self.limit or over_limit:
            conn = await self._connect()
        else:
            conn = await self._acquire(over_limit)
        return await self._exchange(conn, method, path_qs, headers, body, read_timeout_s)

    async def _exchange(
        self,
        conn: _Conn,
        method: str,
        path_qs: str,
        headers: list[tuple[str, str]] | bytes,
        body: bytes,
        read_timeout_s: float | None,
    ) -> Response:
        headers_done: asyncio.Future[None] = self.loop.create_future()
        resp = Response(conn, headers_done)
        try:
            if conn.lost:
                raise Disconnected("the backend closed the connection before the request left")
            self.send(conn, resp, method, path_qs, headers, body, read_timeout_s)
            await headers_done
        except BaseException:
            conn.resp = None
            conn.close()
            raise
        return resp

    def send(
        self,
        conn: _Conn,
        resp: Response,
        method: str,
        path_qs: str,
        headers: list[tuple[str, str]] | bytes,
        body: bytes,
        read_timeout_s: float | None = None,
    ) -> None:
        """Write one request on `conn` (open, no exchange under way); what comes back
        goes to `resp`, silences bounded by `read_timeout_s` (default: the pool's)."""
        conn.head = method == "HEAD"
        conn.resp = resp
        conn.transport.write(self._head(method, path_qs, headers, len(body)) + body)
        timeout_s = read_timeout_s if read_timeout_s is not None else self.read_timeout_s
        if timeout_s is not None:
            conn.arm(timeout_s)

    def take_idle(self) -> _Conn | None:
        """A kept-alive connection ready for a request now (the data plane's way to send
        without waiting), or None: none idle, the pool closed, or requests queued for
        one (they go first; a waiter already woken can still lose the connection to
        this, as it can to `_acquire`, and queues again)."""
        if self._closed or self._waiters:
            return None
        return self._pop_idle()

    def _pop_idle(self) -> _Conn | None:
        """The most recently used idle connection still fit for a request, if any."""
        idle = self._idle
        now = self.loop.time()
        while idle:
            conn = idle.pop()
            if conn.lost:
                continue
            if conn.transport.is_closing():  # the server's close is on its way in
                conn.close()
                continue
            if now - conn.idle_since > KEEPALIVE_S:
                conn.close()
                continue
            conn.reused = True
            return conn
        return None

    def _head(
        self, method: str, path_qs: str, headers: list[tuple[str, str]] | bytes, n: int
    ) -> bytes:
        """The request's head: the start line and `Host` (cached per path), the
        forwarded headers (pairs, or already the lines of a head), and `Content-Length`;
        nothing else is added."""
        start = self._starts.get((method, path_qs))
        if start is None:
            line = f"{method} {self.prefix}{path_qs} HTTP/1.1\r\nHost: {self.host_header}\r\n"
            start = line.encode("utf-8", "surrogateescape")
            if len(self._starts) < 64:
                self._starts[(method, path_qs)] = start
        framing = (
            b"Content-Length: %d\r\n\r\n" % n if n or method not in ("GET", "HEAD") else b"\r\n"
        )
        if isinstance(headers, bytes):
            return start + headers + framing
        lines = "".join([f"{k}: {v}\r\n" for k, v in headers])
        return start + lines.encode("utf-8", "surrogateescape") + framing

    # -- the pool ---------------------------------------------------------------------

    async def _acquire(self, over_limit: bool = False) -> _Conn:
        while True:
            if self._closed:
                raise ConnectFailed("the backend's pool is closed (config reloaded)")
            conn = self._pop_idle()
            if conn is not None:
                return conn
            if over_limit or len(self._open) < self.limit:  # a probe never queues behind traffic
                return await self._connect()
            waiter = self.loop.create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # woken and cancelled at once: pass the turn on
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)

    async def _connect(self) -> _Conn:
        conn = _Conn(self)
        self._open.add(conn)
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                await self.loop.create_connection(
                    lambda: conn,
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.server_hostname,
                )
        except TimeoutError as exc:
            self.forget(conn)
            raise ConnectTimeout(
                f"no connection to {self.host}:{self.port} within {self.connect_timeout_s} s"
            ) from exc
        except OSError as exc:  # refused, unreachable, TLS verification (SSLError)
            self.forget(conn)
            raise ConnectFailed(f"cannot connect to {self.host}:{self.port}: {exc}") from exc
        except BaseException:
            self.forget(conn)
            if conn.transport is not None:
                conn.transport.abort()
            raise
        return conn

    def put_back(self, conn: _Conn) -> None:
        if self._closed or len(self._open) > self.limit:  # a probe's extra connection
            conn.close()
            return
        conn.idle_since = self.loop.time()
        self._idle.append(conn)
        self._wake_one()

    def forget(self, conn: _Conn) -> None:
        """`conn` is closed: it no longer counts against the limit."""
        if conn in self._open:
            self._open.discard(conn)
            if conn in self._idle:
                self._idle.remove(conn)
            self._wake_one()

    def _wake_one(self) -> None:
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
                return

    @property
    def open_connections(self) -> int:
        return len(self._open)

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    async def close(self, *, graceful: bool = False) -> None:
        """Close the pool: idle connections now, and no new requests. With `graceful`
        (a config reload replaced this backend) answers in flight run to their end and
        their connections close on release; without it (shutdown) they are cut too."""
        self._closed = True
        for conn in list(self._open):
            if not graceful or conn.resp is None:
                conn.close()
        self._idle.clear()
        while self._waiters:
            w = self._waiters.popleft()
            if not w.done():
                w.set_result(None)
        await asyncio.sleep(0)


def describe(exc: BaseException) -> str:
    """A short reason label for a failure before the answer (for retry metrics)."""
    if isinstance(exc, ConnectTimeout):
        return "connect_timeout"
    if isinstance(exc, Reset):
        return "reset"
    if isinstance(exc, Disconnected):
        return "disconnected"
    return "connect_failed"


__all__ = [
    "BodyError",
    "ConnectFailed",
    "ConnectTimeout",
    "Disconnected",
    "Pool",
    "ReadTimeout",
    "Reset",
    "Response",
    "UpstreamError",
    "describe",
]
