"""The data plane's answers: a request's headers, the gateway's own JSON answers, and
`Serving`, the request flow of one connection (`proxy.handle`, step for step, on the
bytes the listener read; `listener.Conn` is one).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Generator, Sequence
from email.utils import formatdate
from http import HTTPStatus
from typing import Any

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
from gridroute.core.prefix import PrefixRequest
from gridroute.gateway import overlay_route, proxy, upstream
from gridroute.gateway.admission_queue import wait_in_queue
from gridroute.gateway.fairness_key import fairness_key
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
    transport: asyncio.Transport
    state: State
    close_after: bool
    written: bool
    """Some of the current answer has been written (no error answer can follow)."""
    paused: bool
    method: str
    target: str
    remote: str | None
    peer: str | None

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
        prefix: PrefixRequest | None = None
        if by_overlay is not None:
            overlay, session = by_overlay
            preferred = None
        else:
            session = headers.get(gw.affinity_header) if gw.affinity_header else None
            preferred = current.affinity.get(session, t0) if session else None
            prefix = proxy.prefix_of(body, current.prefixes, gw.cfg.prefix_affinity, t0)
        flow: Generator[Step, Feed, None] | None = None
        who = None
        if fair_order_on(current.snapshot.settings, policy, overlay is not None):
            who = fairness_key(gw.cfg.fairness_key, headers, self.remote, body)
        try:
            flow = request_flow(current, model, policy, preferred, overlay, who, prefix)
            step = await wait_in_queue(flow, next(flow), current)
            d = step.decision
            if session and overlay is None:
                gw.metrics.affinity(preferred, d)
            if prefix is not None:
                gw.metrics.prefix(prefix.outcome)
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
                tracer.end(span, d, site, attempts, status, prefix)

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
