"""The data-plane listener: the routed OpenAI paths on a raw asyncio protocol.

`listener.dataplane: true` serves the API port with this instead of aiohttp's server.
A connection starts here; each request's head is read and checked in place (one scan
for its end, one regular expression over its lines), and a plain routed request

    POST <one of app.ROUTED_PATHS>[?query] HTTP/1.1, Content-Length (no chunked body,
    no Expect, no Upgrade), a head under 8 KiB and 100 lines

runs the same request flow as `proxy.handle` (`core/flow.py`: routing, fair order, the
overlay, ejection, retries, metrics, traces) without building a request or response
object: its body is sliced from the bytes received, its `model` parsed as
`request_body.parse_model` does, the backend's answer written back through the same
keep-alive pools (`gateway/upstream.py`), its head in one write with the first bytes
of the body. Anything else (another path or method, a chunked or `Expect` body, a head
that does not parse, a huge head) hands the connection, with every byte it sent so
far, to aiohttp's guarded handler (`inbound/guard.py`), which then owns it for good:
admin, status, the dashboard and every 400/404/405/431 answer are aiohttp's, as
without this listener.

The listener's bounds are the guard's, on the same `Guard` (one count of open
connections, one `ClientErrors`):

    accept over max_connections   503 too_many_connections, close (not counted open)
    head not complete in header_timeout_s (from accept, or from the first byte of a
      kept-alive connection's next request): 408 when some of it came, else close
    body silent for body_timeout_s: 408, close
    Content-Length over limits.max_body_bytes: 413 before reading it, close
    body not JSON / no model: 400 (kept alive), as `proxy.read_model`
    idle between requests for keepalive_timeout_s: close (counted idle_timeout)
    draining: 503 shutting_down + Retry-After + Connection: close; every answer closes

The timers are lazy: a connection has one timer handle and a deadline; a request moves
the deadline and the timer re-arms itself when it fires early, so nothing is armed or
cancelled per request. A client that goes away cancels its request's task (as
aiohttp's `handler_cancellation`), which closes the upstream connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import re
import time
from collections.abc import Generator, Sequence
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

from aiohttp import web

from gridroute.core import Decision, SiteView
from gridroute.core.fairness import fair_order_on
from gridroute.core.flow import (
    Answered,
    Attempt,
    Feed,
    GiveUp,
    Refuse,
    Relay,
    Step,
    request_flow,
)
from gridroute.core.group_route import GroupDecision
from gridroute.core.overlay_request import OverlayRequest
from gridroute.gateway import overlay_route, proxy, upstream
from gridroute.gateway.admission_queue import wait_in_queue
from gridroute.gateway.fairness_key import fairness_key
from gridroute.gateway.request_body import parse_model
from gridroute.gateway.runtime import Gateway
from gridroute.inbound.client_errors import Kind
from gridroute.inbound.guard import raw_response
from gridroute.wire import openai_errors as errs

log = logging.getLogger("gridroute.clients")

MAX_HEAD = 8190
"""A head longer than this goes to aiohttp, whose limits then apply (its line limit is
8190 bytes, a field 64 KiB), answering 431 past them; a plain OpenAI head is < 1 KiB."""
MAX_HEADERS = 100
"""A head with more header lines goes to aiohttp (its limit, 128, answers 431)."""

_REQUEST_LINE = re.compile(rb"([A-Z]+) (/[!-~]*) HTTP/1\.1")
_HEADER_LINES = re.compile(rb"(?:[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[\t -~\x80-\xff]*\r\n)*")
"""Every header line a token, a colon and a value without control characters: a head
that is anything else (obs-fold, a space before the colon, bare LF) is aiohttp's."""


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
    with `raw`, the (name, value) pairs in order as sent."""

    __slots__ = ("raw",)

    def __init__(self, raw: list[tuple[str, str]]) -> None:
        super().__init__()
        self.raw = raw
        for k, v in raw:
            self.setdefault(k.lower(), v)

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


_DATE = _Date()


def _answer_bytes(
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
        f"Content-Length: {len(body)}\r\nDate: {_DATE.now()}\r\n"
    )
    if retry_after is not None:
        head += f"Retry-After: {retry_after}\r\n"
    if close:
        head += "Connection: close\r\n"
    return (head + extra + "\r\n").encode() + body


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


class Conn(asyncio.Protocol):
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
        self._wake_drain()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
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
        length = -1
        for hline in buf[line_end + 2 : end].split(b"\r\n"):
            k, _, v = hline.partition(b":")
            name = k.decode("latin-1")
            lk = name.lower()
            value = v.strip(b" \t").decode("utf-8", "surrogateescape")
            if lk == "content-length":
                if length >= 0 or not value.isdigit():
                    self._hand_off()  # two lengths, or not a number: aiohttp's 400
                    return
                length = int(value)
            elif lk in ("transfer-encoding", "expect", "upgrade"):
                self._hand_off()
                return
            raw.append((name, value))
        if length < 0:
            self._hand_off()
            return
        self.method = "POST"
        self.target = target.decode("utf-8", "surrogateescape")
        headers = self.headers = Headers(raw)
        conn = headers.get("connection")
        self.close_after = conn is not None and "close" in conn.lower()
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
            answer = _answer_bytes(
                401, errs.UNAUTHORIZED, close=True, extra="WWW-Authenticate: Bearer\r\n"
            )
        elif gw.draining:
            answer = _answer_bytes(503, errs.SHUTTING_DOWN, 1, close=True)
        else:
            gw.client_errors.note(Kind.BODY_TOO_LARGE, f"Content-Length {length}", self.remote)
            answer = _answer_bytes(413, errs.TOO_LARGE, close=True)
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
        self.task = self.loop.create_task(self._serve(headers, body))

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
            self.transport.write(_answer_bytes(status, body, close=True))
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

    def write_answer(
        self, status: int, body: bytes, retry_after: int | None = None, extra: str = ""
    ) -> None:
        close = self.close_after or self.gw.draining
        self.close_after = close
        self.written = True
        self.transport.write(_answer_bytes(status, body, retry_after, close=close, extra=extra))

    async def _serve(self, headers: Headers, body: bytes) -> None:
        try:
            await self._route(headers, body)
        except asyncio.CancelledError:
            raise
        except ConnectionError:
            self.abort()
        except Exception as exc:  # a bug: answer 500 once, as aiohttp's handle_error
            errors = self.gw.client_errors
            errors.note(Kind.INTERNAL, f"{type(exc).__name__}: {exc}", self.peer)
            if errors.counts[Kind.INTERNAL] == 1:
                log.error("first internal error of this process", exc_info=exc)
            if self.written or self.state is State.GONE:
                self.abort()
            else:
                self.close_after = True
                self.write_answer(500, errs.INTERNAL)
        finally:
            self._done()

    async def _route(self, headers: Headers, body: bytes) -> None:
        """`proxy.handle`, step for step, on this connection's bytes."""
        gw = self.gw
        clock = gw.current.monotonic
        t0 = clock()
        target = self.target
        q = target.find("?")
        path = target if q < 0 else target[:q]
        if gw.api_keys is not None and not gw.api_keys.allows_header(
            headers.get("authorization", "")
        ):
            gw.client_errors.note(Kind.UNAUTHORIZED, path[:100], self.remote)
            self.write_answer(401, errs.UNAUTHORIZED, extra="WWW-Authenticate: Bearer\r\n")
            return
        if gw.draining:
            self.close_after = True
            self.write_answer(503, errs.SHUTTING_DOWN, 1)
            return
        got = parse_model(body)
        if isinstance(got, tuple):
            kind, error = got
            gw.client_errors.note(kind, "", self.remote)
            self.write_answer(400, error)
            return
        model = got
        current = gw.current
        policy = current.routing.policies.get(model)
        if policy is None:
            gw.metrics.duration("", 404, clock() - t0)
            self.write_answer(404, errs.MODEL_NOT_FOUND)
            return
        tracer = gw.tracer
        span = tracer.start(path, model, policy) if tracer is not None else None
        d: Decision | None = None
        site = ""
        status = 0
        attempts = 0
        sent: list[float] = []
        by_overlay = overlay_route.request_for(gw, headers, body, model, t0)
        overlay: OverlayRequest | None = None
        watch = gw.overlay
        choice: GroupDecision | None = None
        if by_overlay is not None:
            overlay, session = by_overlay
            preferred = None
        else:
            session = headers.get(gw.affinity_header) if gw.affinity_header else None
            preferred = current.affinity.get(session, t0) if session else None
        flow: Generator[Step, Feed, None] | None = None
        who = None
        if fair_order_on(current.snapshot.settings, policy, overlay is not None):
            who = fairness_key(gw.cfg.fairness_key, headers, self.remote, body)
        try:
            flow = request_flow(current, model, policy, preferred, overlay, who)
            step = await wait_in_queue(flow, next(flow), current)
            d = step.decision
            if session and overlay is None:
                gw.metrics.affinity(preferred, d)
            fwd = proxy.forward_header_list(headers.raw, headers.get("connection"))
            while True:
                if isinstance(step, Attempt | Refuse):
                    d = step.decision
                    gw.metrics.decision(d)
                    gw.refusals.note(model, d.outcome)
                    if step.choice is not None and watch is not None:
                        choice = step.choice
                        overlay_route.count(watch, choice, attempts == 0, session is not None)
                if isinstance(step, Refuse):
                    status, err, after = proxy.refusal(d)
                    self.write_answer(status, err, after)
                    return
                if isinstance(step, GiveUp):
                    status, err, after = proxy.given_up(step)
                    self.write_answer(status, err, after)
                    return
                assert isinstance(step, Attempt), step
                if step.after is not None:
                    gw.metrics.retry(*step.after)
                site = step.view.site
                attempts += 1
                child = (
                    tracer.attempt(span, step.decision, attempts) if tracer is not None else None
                )
                got_: int | Step | None = None
                try:
                    got_ = await self._attempt(step, flow, body, fwd, sent, overlay)
                finally:
                    if child is not None and tracer is not None:
                        answered = got_ if isinstance(got_, int) else None
                        after_ = got_.after if isinstance(got_, Attempt) else None
                        tracer.attempt_end(child, answered, None if after_ is None else after_[1])
                if isinstance(got_, int):
                    status = got_
                    if session and status < 500:
                        current.affinity.put(session, step.view.key, clock())
                    return
                step = got_
        finally:
            if flow is not None:
                flow.close()
            if sent:
                gw.metrics.added(sent[-1] - t0)
            gw.metrics.duration(site, status or 499, clock() - t0)
            if span is not None and tracer is not None:
                if overlay is not None:
                    overlay_route.trace(span, choice, overlay.table)
                tracer.end(span, d, site, attempts, status)

    async def _attempt(
        self,
        step: Attempt,
        flow: Generator[Step, Feed, None],
        body: bytes,
        fwd: list[tuple[str, str]],
        sent: list[float],
        overlay: OverlayRequest | None,
    ) -> int | Step:
        """`proxy._attempt`: the relayed answer's status, or the flow's next step."""
        gw = self.gw
        current = gw.current
        view = step.view
        key = view.key
        backend = gw.backends.by_key.get(key)
        own = current.own
        own.start(key, current.clock())
        try:
            try:
                if backend is None:
                    raise upstream.ConnectFailed("the site left the config")
                sent.append(current.clock())
                up = await backend.pool.request(self.method, self.target, fwd, body)
            except upstream.UpstreamError as exc:
                return flow.send(proxy.failure_of(exc))
            try:
                nxt = flow.send(Answered(up.status))
                if isinstance(nxt, Relay):
                    choice = step.choice
                    extra: Sequence[tuple[str, str]] = ()
                    if overlay is not None and choice is not None:
                        extra = overlay_route.evidence(choice, overlay.table)
                    await self._relay(up, view, extra)
                    return up.status
                return nxt
            finally:
                up.release()
        finally:
            own.end(key, current.clock())
            current.changes.wake()

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
            add(f"Date: {_DATE.now()}\r\n")
        if up.status not in (204, 304) and up.status >= 200:
            add(
                f"Content-Length: {length}\r\n" if length >= 0 else "Transfer-Encoding: chunked\r\n"
            )
        if self.close_after or self.gw.draining:
            self.close_after = True
            add("Connection: close\r\n")
        add("\r\n")
        return "".join(parts).encode("utf-8", "surrogateescape")

    async def _relay(
        self, up: upstream.Response, view: SiteView, extra: Sequence[tuple[str, str]]
    ) -> None:
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
            return
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
                    return
                t.write(head + out if head else out)
                head = b""
                if self.paused:
                    await self.drain()
                chunk = await up.readany()
            t.write(head + (b"" if sized else b"0\r\n\r\n"))
        except upstream.UpstreamError:
            self.abort()


__all__ = ["DataPlane", "Headers"]
