"""The data plane's answers: a request's headers, the gateway's own JSON answers, and
`Serving`, one connection's side of the request path: the checks before the flow, then
`proxy.RouteRun` (the flow both listeners share) with this connection as its `Exchange`
(`listener.Conn` is one).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Coroutine, Sequence
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

from gridroute.core import SiteView
from gridroute.core.flow import Hold
from gridroute.gateway import proxy, upstream
from gridroute.gateway.dataplane import splice
from gridroute.gateway.request_body import parse_model
from gridroute.gateway.runtime import Gateway
from gridroute.inbound.client_errors import Kind
from gridroute.wire import openai_errors as errs

log = logging.getLogger("gridroute.clients")


class State(enum.Enum):
    IDLE = "idle"
    """Between requests (or before the first): no byte of a request yet."""
    HEAD = "head"
    BODY = "body"
    BUSY = "busy"
    """A request is being answered; bytes that come meanwhile wait (pipelining)."""
    GONE = "gone"
    """Closed, or handed to aiohttp."""


class Headers(dict[str, str]):
    """A request's headers: lower-case name -> first value (`get` takes any case),
    with `raw`, the (name, value) pairs in order as sent, and `fwd`, the forwarded
    ones as the lines of a head, when the listener built them while parsing."""

    __slots__ = ("fwd", "raw")

    def __init__(self, raw: list[tuple[str, str]], first: dict[str, str] | None = None) -> None:
        if first is None:
            first = {}
            for k, v in raw:
                first.setdefault(k.lower(), v)
        super().__init__(first)
        self.raw = raw
        self.fwd: bytes | None = None

    def get(self, key: str, default: Any = None) -> Any:
        return dict.get(self, key.lower(), default)


class _Date:
    """The `Date` header value, formatted once per second."""

    def __init__(self) -> None:
        self._at = 0
        self._value = ""

    def now(self) -> str:
        t = int(time.time())
        if t != self._at:
            self._at = t
            self._value = formatdate(t, usegmt=True)
        return self._value


DATE = _Date()


def answer_bytes(
    status: int,
    body: bytes,
    retry_after: int | None = None,
    *,
    close: bool = False,
    extra: str = "",
) -> bytes:
    """One of the gateway's own JSON answers, whole."""
    phrase = HTTPStatus(status).phrase
    head = (
        f"HTTP/1.1 {status} {phrase}\r\nContent-Type: {errs.CONTENT_TYPE}\r\n"
        f"Content-Length: {len(body)}\r\nDate: {DATE.now()}\r\n"
    )
    if retry_after is not None:
        head += f"Retry-After: {retry_after}\r\n"
    if close:
        head += "Connection: close\r\n"
    return (head + extra + "\r\n").encode() + body


class Serving:
    """What a connection does with one request it read (the listener's `Conn`)."""

    gw: Gateway
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    state: State
    close_after: bool
    written: bool
    """Some of the current answer has been written (no error answer can follow)."""
    paused: bool
    method: str
    target: str
    headers: Headers | None
    remote: str | None
    peer: str | None
    task: asyncio.Task[None] | None
    splice: splice.Splice | None
    """The attempt under way in callbacks, if any (the client's events go to it)."""

    def abort(self) -> None:
        raise NotImplementedError

    def _done(self) -> None:
        raise NotImplementedError

    async def drain(self) -> None:
        raise NotImplementedError

    def write_answer(
        self, status: int, body: bytes, retry_after: int | None = None, extra: str = ""
    ) -> None:
        close = self.close_after or self.gw.draining
        self.close_after = close
        self.written = True
        self.transport.write(answer_bytes(status, body, retry_after, close=close, extra=extra))

    def begin(self, headers: Headers, body: bytes) -> None:
        """`proxy.handle`'s checks on this connection's bytes, then the request's run:
        in callbacks (`splice`) when its first step is an attempt on a backend with an
        idle kept-alive connection, else in a task (`proxy.drive`) from where it got."""
        if self.state is State.GONE:
            return  # the client left before its turn: nothing was started for it
        gw = self.gw
        run: proxy.RouteRun | None = None
        try:
            t0 = gw.current.monotonic()
            target = self.target
            q = target.find("?")
            path = target if q < 0 else target[:q]
            if gw.api_keys is not None and not gw.api_keys.allows_header(
                headers.get("authorization", "")
            ):
                gw.client_errors.note(Kind.UNAUTHORIZED, path[:100], self.remote)
                self.write_answer(401, errs.UNAUTHORIZED, extra="WWW-Authenticate: Bearer\r\n")
                self._done()
                return
            if gw.draining:
                self.close_after = True
                self.write_answer(503, errs.SHUTTING_DOWN, 1)
                self._done()
                return
            got = parse_model(body)
            if isinstance(got, tuple):
                kind, error = got
                gw.client_errors.note(kind, "", self.remote)
                self.write_answer(400, error)
                self._done()
                return
            run = proxy.open_run(gw, self, path, headers, self.remote, body, got, t0)
            if run is None:
                self._done()
                return
            step = run.first()
            if isinstance(step, Hold):
                self.carry_on(proxy.drive(run, held=step), run)
                return
            run.decided(step)
            att = run.book(step)
            if att is None:
                run.finish()
                self._done()
                return
            if not splice.start(self, run, att):
                self.carry_on(proxy.drive(run, att), run)
        except Exception as exc:
            self.splice = None
            if run is not None:
                run.attempt_end(None)
                run.finish()
            self.fail(exc)
            self._done()

    def carry_on(self, work: Coroutine[Any, Any, None], run: proxy.RouteRun) -> None:
        """The rest of the request in a task (`_carry`)."""
        task = self.task = self.loop.create_task(self._carry(work))

        def settle(t: asyncio.Task[None]) -> None:
            # Cancelled before its first step (the client's close came in the same
            # loop pass), the coroutine never ran its `finally`: settle it here.
            if t.cancelled() and not run.finished:
                work.close()
                run.abandon()

        task.add_done_callback(settle)

    async def _carry(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.fail(exc)
        finally:
            self._done()

    def fail(self, exc: Exception) -> None:
        """A fault while serving: the client left (`ConnectionError`: cut), else a bug,
        answered 500 once (logged the first time), as aiohttp's `handle_error`."""
        if isinstance(exc, ConnectionError):
            self.abort()
            return
        gw = self.gw
        errors = gw.client_errors
        errors.note(Kind.INTERNAL, f"{type(exc).__name__}: {exc}", self.peer)
        if errors.counts[Kind.INTERNAL] == 1:
            log.error("first internal error of this process", exc_info=exc)
        if self.written or self.state is State.GONE:
            self.abort()
        else:
            self.close_after = True
            self.write_answer(500, errs.INTERNAL)

    def forward(self) -> proxy.Forwarded:
        headers = self.headers
        assert headers is not None
        if headers.fwd is not None:
            return headers.fwd
        return proxy.forward_header_list(headers.raw, headers.get("connection"))

    def answer(self, status: int, body: bytes, retry_after: int | None = None) -> None:
        self.write_answer(status, body, retry_after)

    def _head(
        self, up: upstream.Response, view: SiteView, extra: Sequence[tuple[str, str]], length: int
    ) -> bytes:
        """The answer's head: the backend's status and headers minus hop-by-hop ones and
        `x-grid-*`, this gateway's `x-grid-*`, and the framing (`length` < 0: chunked)."""
        parts = [f"HTTP/1.1 {up.status} {up.reason}\r\n"]
        add = parts.append
        hop = proxy._HOP_BY_HOP
        dated = False
        for k, v in up.headers:
            lk = k.lower()
            if lk in hop or lk.startswith("x-grid-"):
                continue
            if lk == "date":
                dated = True
            add(f"{k}: {v}\r\n")
        add(f"x-grid-site: {view.site}\r\nx-grid-backend: {view.provider}\r\n")
        for k, v in extra:
            add(f"{k}: {v}\r\n")
        if not dated:
            add(f"Date: {DATE.now()}\r\n")
        if up.status not in (204, 304) and up.status >= 200:
            add(
                f"Content-Length: {length}\r\n" if length >= 0 else "Transfer-Encoding: chunked\r\n"
            )
        if self.close_after or self.gw.draining:
            self.close_after = True
            add("Connection: close\r\n")
        add("\r\n")
        return "".join(parts).encode("utf-8", "surrogateescape")

    async def relay(
        self, up: upstream.Response, view: SiteView, extra: Sequence[tuple[str, str]]
    ) -> int:
        """`proxy._relay`: the answer, chunk by chunk, with backpressure both ways; a
        backend failing mid-body cuts the client connection (never a complete-looking
        truncated answer)."""
        t = self.transport
        if self.state is State.GONE:
            raise ConnectionResetError("the client connection closed")
        no_body = up.status in (204, 304) or up.status < 200
        if up.is_eof():  # the whole body came with the headers: one write
            data = up.read_nowait()
            self.written = True
            t.write(self._head(up, view, extra, 0 if no_body else len(data)) + data)
            return up.status
        sized = up.content_length is not None and not up.chunked
        length = up.content_length if sized and up.content_length is not None else -1
        self.written = True
        try:
            chunk = up.read_nowait()
            head = self._head(up, view, extra, length)
            if not chunk:
                t.write(head)  # nothing yet: the status goes now
                head = b""
                chunk = await up.readany()
            while chunk:
                out = chunk if sized else b"%x\r\n%b\r\n" % (len(chunk), chunk)
                if up.at_eof():
                    t.write(head + out + (b"" if sized else b"0\r\n\r\n"))
                    return up.status
                t.write(head + out if head else out)
                head = b""
                if self.paused:
                    await self.drain()
                chunk = await up.readany()
            t.write(head + (b"" if sized else b"0\r\n\r\n"))
        except upstream.UpstreamError:
            self.abort()
        return up.status
