"""The data plane's listener: accept, read a request's head and body within the
listener's bounds, hand what it does not serve to aiohttp (see the package's docstring).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Sequence
from typing import Any

from aiohttp import web

from gridroute.gateway import proxy
from gridroute.gateway.dataplane.answer import Headers, Serving, State, answer_bytes
from gridroute.gateway.dataplane.splice import Splice
from gridroute.gateway.runtime import Gateway
from gridroute.inbound.client_errors import Kind
from gridroute.inbound.guard import raw_response
from gridroute.wire import openai_errors as errs

MAX_HEAD = 8190
"""A head longer than this goes to aiohttp, whose limits then apply (its line limit is
8190 bytes, a field 64 KiB), answering 431 past them; a plain OpenAI head is < 1 KiB."""
MAX_HEADERS = 100
"""A head with more header lines goes to aiohttp (its limit, 128, answers 431)."""

_STRIP = proxy.REQUEST_ONLY
"""Request headers never forwarded (hop-by-hop ones and `Content-Encoding`)."""
_REQUEST_LINE = re.compile(rb"([A-Z]+) (/[!-~]*) HTTP/1\.1")
_HEADER_LINES = re.compile(rb"(?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[\t -~\x80-\xff]*\r\n)*")
"""Every header line a token, a colon and a value without control characters: a head
that is anything else (obs-fold, a space before the colon, bare LF) is aiohttp's."""


class DataPlane:
    """The API listener on the raw protocol; `runner` is the gateway's aiohttp runner
    (set up, no site of its own), which connections that are not the fast path's go to."""

    def __init__(self, gw: Gateway, runner: web.AppRunner, routed: Sequence[str]) -> None:
        self.gw = gw
        self.runner = runner
        self.routed = frozenset(routed)
        self.conns: set[Conn] = set()
        self.server: asyncio.Server | None = None
        self.loop = asyncio.get_running_loop()

    async def start(self, host: str, port: int, *, reuse_port: bool = False) -> None:
        self.server = await self.loop.create_server(
            lambda: Conn(self), host, port, reuse_port=reuse_port, backlog=1024
        )

    @property
    def addresses(self) -> list[Any]:
        return [] if self.server is None else [s.getsockname() for s in self.server.sockets]

    async def shutdown(self, grace_s: float) -> None:
        """Stop listening, close idle connections, give requests in flight `grace_s`,
        then cut what is left."""
        if self.server is not None:
            self.server.close()
        for conn in list(self.conns):
            if conn.state is not State.BUSY:
                conn.close()
        deadline = self.loop.time() + grace_s
        while any(c.state is State.BUSY for c in self.conns) and self.loop.time() < deadline:
            await asyncio.sleep(0.05)
        for conn in list(self.conns):
            conn.abort()
        if self.server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 1.0)


class Conn(Serving, asyncio.Protocol):
    """One client connection on the data plane."""

    def __init__(self, plane: DataPlane) -> None:
        self.plane = plane
        self.gw = plane.gw
        self.loop = plane.loop
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        self.state = State.IDLE
        self.buf = b""
        self.counted = False
        self.remote: str | None = None
        self.peer: str | None = None
        self.deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self.task: asyncio.Task[None] | None = None
        self.splice: Splice | None = None
        self.paused = False
        self._drain: asyncio.Future[None] | None = None
        self.close_after = False
        self.written = False
        """Some of the current answer has been written (no error answer can follow)."""
        # the request being read
        self.method = ""
        self.target = ""
        self.headers: Headers | None = None
        self.need = 0
        self.parts: list[bytes] = []
        """The body's pieces so far (state BODY), `have` bytes in all."""
        self.have = 0
        self.reading = True

    # -- asyncio.Protocol -------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        guard = self.gw.guard
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and len(peer) >= 2:
            self.remote = str(peer[0])
            self.peer = f"{peer[0]}:{peer[1]}"
        if guard.open >= guard.settings.max_connections:
            guard.errors.note(Kind.CONNECTION_LIMIT, f"{guard.open} open", self.peer)
            with contextlib.suppress(Exception):
                self.transport.write(raw_response(503, errs.TOO_MANY_CONNECTIONS, retry_after=1))
            self.state = State.GONE
            self.transport.close()
            return
        guard.open += 1
        self.counted = True
        self.plane.conns.add(self)  # TCP_NODELAY: the loop sets it on every TCP transport
        self.state = State.HEAD  # the header timer runs from the accept
        self._arm(guard.settings.header_timeout_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._uncount()
        self.state = State.GONE
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.task is not None and not self.task.done():
            self.task.cancel()  # the client left: stop the upstream too
        sp = self.splice
        if sp is not None:
            sp.client_gone()
        self._wake_drain()

    def pause_writing(self) -> None:
        self.paused = True
        sp = self.splice
        if sp is not None:
            sp.pause()

    def resume_writing(self) -> None:
        self.paused = False
        sp = self.splice
        if sp is not None:
            sp.resume()
        self._wake_drain()

    def _wake_drain(self) -> None:
        w = self._drain
        if w is not None and not w.done():
            w.set_result(None)

    async def drain(self) -> None:
        while self.paused and self.state is not State.GONE:
            w = self._drain = self.loop.create_future()
            try:
                await w
            finally:
                self._drain = None
        if self.state is State.GONE:
            raise ConnectionResetError("the client connection closed")

    def data_received(self, data: bytes) -> None:
        state = self.state
        if state is State.BUSY:
            self.buf += data  # the next request, pipelined: read once this one is done
            if len(self.buf) > MAX_HEAD and self.reading:
                self.reading = False
                self.transport.pause_reading()
            return
        if state is State.GONE:
            return
        if state is State.BODY:
            self.parts.append(data)
            self.have += len(data)
            self.deadline = self.loop.time() + self.gw.guard.settings.body_timeout_s
            if self.have >= self.need:
                self._body_complete()
            return
        if state is State.IDLE:
            self.state = State.HEAD
            self._arm(self.gw.guard.settings.header_timeout_s)
        self.buf = self.buf + data if self.buf else data
        self._parse()

    def eof_received(self) -> bool | None:
        return None

    # -- reading a request ------------------------------------------------------------

    def _parse(self) -> None:
        """A head in `buf` (state HEAD): read it, or hand the connection to aiohttp."""
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                self._hand_off()
            return
        if end > MAX_HEAD or buf.count(b"\r\n", 0, end) > MAX_HEADERS:
            self._hand_off()
            return
        line_end = buf.find(b"\r\n")
        m = _REQUEST_LINE.fullmatch(buf, 0, line_end)
        if m is None or _HEADER_LINES.fullmatch(buf, line_end + 2, end + 2) is None:
            self._hand_off()
            return
        method = m.group(1)
        target = m.group(2)
        q = target.find(b"?")
        path = target if q < 0 else target[:q]
        if method != b"POST" or path.decode("latin-1") not in self.plane.routed:
            self._hand_off()
            return
        raw: list[tuple[str, str]] = []
        first: dict[str, str] = {}
        fwd: list[bytes] = []  # the lines to send upstream (`proxy.forward_header_list`)
        strip = _STRIP
        length = -1
        for hline in buf[line_end + 2 : end].split(b"\r\n"):
            k, _, v = hline.partition(b":")
            name = k.decode("latin-1")
            lk = name.lower()
            vb = v.strip(b" \t")
            value = vb.decode("utf-8", "surrogateescape")
            if lk not in strip and not lk.startswith("x-grid-"):
                fwd.append(k + b": " + vb + b"\r\n")
            if lk == "content-length":
                if length >= 0 or not value.isdigit():
                    self._hand_off()  # two lengths, or not a number: aiohttp's 400
                    return
                length = int(value)
            elif lk in ("transfer-encoding", "expect", "upgrade", "content-encoding"):
                # A compressed body (`Content-Encoding`) is aiohttp's to decode too:
                # read raw here, its JSON would be answered 400 `invalid_json`.
                self._hand_off()
                return
            raw.append((name, value))
            if lk not in first:
                first[lk] = value
        if length < 0:
            self._hand_off()
            return
        self.method = "POST"
        self.target = target.decode("utf-8", "surrogateescape")
        headers = self.headers = Headers(raw, first)
        conn = first.get("connection")
        if conn is None:
            self.close_after = False
            headers.fwd = b"".join(fwd)
        else:  # it may name more hop-by-hop headers: `forward` filters the slow way
            self.close_after = "close" in conn.lower()
        gw = self.gw
        if length > gw.max_body:
            self._too_large(headers, length)
            return
        self.need = length
        rest = buf[end + 4 :]
        self.buf = b""
        self.parts = [rest]
        self.have = len(rest)
        self.state = State.BODY
        self.deadline = self.loop.time() + gw.guard.settings.body_timeout_s
        if self.have >= length:
            self._body_complete()

    def _too_large(self, headers: Headers, length: int) -> None:
        """A body over the limit, refused before it is read (and the connection closed),
        after the checks `proxy.handle` makes before reading a body (key, drain)."""
        gw = self.gw
        self.state = State.GONE
        if gw.api_keys is not None and not gw.api_keys.allows_header(
            headers.get("authorization", "")
        ):
            q = self.target.find("?")
            path = self.target if q < 0 else self.target[:q]
            gw.client_errors.note(Kind.UNAUTHORIZED, path[:100], self.remote)
            answer = answer_bytes(
                401, errs.UNAUTHORIZED, close=True, extra="WWW-Authenticate: Bearer\r\n"
            )
        elif gw.draining:
            answer = answer_bytes(503, errs.SHUTTING_DOWN, 1, close=True)
        else:
            gw.client_errors.note(Kind.BODY_TOO_LARGE, f"Content-Length {length}", self.remote)
            answer = answer_bytes(413, errs.TOO_LARGE, close=True)
        with contextlib.suppress(Exception):
            self.transport.write(answer)
        self.close()

    def _body_complete(self) -> None:
        n = self.need
        parts = self.parts
        got = parts[0] if len(parts) == 1 else b"".join(parts)
        self.parts = []
        body, self.buf = (got, b"") if len(got) == n else (got[:n], got[n:])
        self.state = State.BUSY
        headers = self.headers
        assert headers is not None
        self.written = False
        self.loop.call_soon(self.begin, headers, body)

    def _hand_off(self) -> None:
        """From now on aiohttp's guarded handler owns this connection (and gets every
        byte of the request under way)."""
        data, self.buf = self.buf, b""
        self.state = State.GONE
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._uncount()  # the handler counts it (and checks the limit) itself
        self.plane.conns.discard(self)
        server = self.plane.runner.server
        assert server is not None
        handler = server()
        self.transport.set_protocol(handler)
        handler.connection_made(self.transport)
        if data:
            handler.data_received(data)

    def _uncount(self) -> None:
        if self.counted:
            self.gw.guard.open -= 1
            self.counted = False
        self.plane.conns.discard(self)

    # -- timers -----------------------------------------------------------------------

    def _arm(self, after_s: float) -> None:
        """Move the deadline to `after_s` from now. The one timer is set at most the
        shortest of the three timeouts ahead, so a later deadline never needs it moved
        earlier (no cancel + re-arm per request): it fires, sees the deadline ahead,
        and re-arms for what is left."""
        now = self.loop.time()
        self.deadline = now + after_s
        t = self._timer
        if t is not None and t.when() > self.deadline:  # a deadline shorter than all three
            t.cancel()
            t = self._timer = None
        if t is None:
            s = self.gw.guard.settings
            first = min(after_s, s.header_timeout_s, s.body_timeout_s, s.keepalive_timeout_s)
            self._timer = self.loop.call_at(now + first, self._tick)

    def _tick(self) -> None:
        self._timer = None
        state = self.state
        if state is State.GONE or state is State.BUSY:
            return  # an answer under way has no client-side deadline; re-armed after
        now = self.loop.time()
        if now < self.deadline:
            s = self.gw.guard.settings
            first = min(s.header_timeout_s, s.body_timeout_s, s.keepalive_timeout_s)
            self._timer = self.loop.call_at(min(self.deadline, now + first), self._tick)
            return
        errors = self.gw.client_errors
        if state is State.IDLE:
            errors.note(Kind.IDLE_TIMEOUT)
            self.close()
        elif state is State.HEAD:
            got = len(self.buf)
            errors.note(Kind.HEADER_TIMEOUT, f"{got} bytes of headers", self.peer)
            if got:
                with contextlib.suppress(Exception):
                    self.transport.write(raw_response(408, errs.REQUEST_TIMEOUT))
            self.close()
        else:  # BODY
            errors.note(Kind.BODY_TIMEOUT, f"{self.have} bytes read", self.remote)
            self._finish_now(408, errs.REQUEST_TIMEOUT)

    # -- answering --------------------------------------------------------------------

    def close(self) -> None:
        self.state = State.GONE
        self._uncount()
        self.transport.close()

    def abort(self) -> None:
        self.state = State.GONE
        self._uncount()
        self.transport.abort()

    def _finish_now(self, status: int, body: bytes) -> None:
        """An error answer before the request was served, closing the connection."""
        self.state = State.GONE
        with contextlib.suppress(Exception):
            self.transport.write(answer_bytes(status, body, close=True))
        self.close()

    def _done(self) -> None:
        """The answer is out: close, or wait for the next request (maybe here already)."""
        self.task = None
        if self.state is State.GONE:
            return
        if self.close_after or self.gw.draining:
            self.state = State.GONE
            self.close()
            return
        self.state = State.IDLE
        self._arm(self.gw.guard.settings.keepalive_timeout_s)
        if not self.reading:
            self.reading = True
            self.transport.resume_reading()
        if self.buf:
            self.data_received(b"")
