"""An aiohttp runner whose connections are bounded in time and number.

    runner = GuardedRunner(app, guard=Guard(settings, errors), ...)  # as web.AppRunner

Per connection (a `RequestHandler` subclass, so nothing runs per request):

    accept --(open >= max_connections)--> 503 too_many_connections, close
      |  header timer (header_timeout_s) from accept
      v
    headers parsed --> handler (body reads bounded by body_timeout_s, see `read_body`)
      |  response sent, kept alive: aiohttp's idle timer (keepalive_timeout_s)
      v
    first byte of the next request: header timer again

A header timer that runs out answers 408 (when part of a request came) and closes.
Parser errors (10,000 headers, a 1 MiB header, garbage) and unhandled handler errors
answer a JSON error body instead of aiohttp's text/plain one, and go to `ClientErrors`
(counted, logged at most once per interval per kind, never a traceback per request).
"""

from __future__ import annotations

import asyncio
import contextlib
import http
import logging
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import BadHttpMessage, LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_server import Server

from gridroute.inbound.client_errors import ClientErrors, Kind
from gridroute.inbound.settings import ListenerSettings
from gridroute.wire import openai_errors as errs

log = logging.getLogger("gridroute.clients")


class Guard:
    """One listener's bounds and its count of open connections (shared by them all)."""

    def __init__(self, settings: ListenerSettings, errors: ClientErrors) -> None:
        self.settings = settings
        self.errors = errors
        self.open = 0
        """Client connections open now (those refused over the limit are not counted)."""


def raw_response(status: int, body: bytes, retry_after: int | None = None) -> bytes:
    """A whole HTTP/1.1 response with `Connection: close`, for a connection that has no
    request object (refused at accept, timed out before its headers)."""
    phrase = http.HTTPStatus(status).phrase
    extra = f"Retry-After: {retry_after}\r\n" if retry_after is not None else ""
    head = (
        f"HTTP/1.1 {status} {phrase}\r\nContent-Type: {errs.CONTENT_TYPE}\r\n"
        f"Content-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n"
    )
    return head.encode() + body


def json_error(status: int, body: bytes, retry_after: int | None = None) -> web.Response:
    """An error answer with a JSON body that closes its connection."""
    headers = None if retry_after is None else {"Retry-After": str(retry_after)}
    resp = web.Response(status=status, body=body, content_type=errs.CONTENT_TYPE, headers=headers)
    resp.force_close()
    return resp


class GuardedHandler(RequestHandler):
    """aiohttp's connection protocol with the header timer, the limit and JSON errors."""

    def __init__(self, manager: Server, *, guard: Guard, **kwargs: Any) -> None:
        kwargs["keepalive_timeout"] = guard.settings.keepalive_timeout_s
        super().__init__(manager, **kwargs)
        self._guard = guard
        self._counted = False
        self._header_timer: asyncio.TimerHandle | None = None
        self._header_bytes = 0

    # --- the connection limit and the header timer ----------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        guard = self._guard
        if guard.open >= guard.settings.max_connections:
            guard.errors.note(Kind.CONNECTION_LIMIT, f"{guard.open} open", self._peer())
            with contextlib.suppress(Exception):
                assert isinstance(transport, asyncio.WriteTransport)
                transport.write(raw_response(503, errs.TOO_MANY_CONNECTIONS, retry_after=1))
            self.force_close()
            return
        guard.open += 1
        self._counted = True
        self._arm()

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._counted:
            self._guard.open -= 1
            self._counted = False
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        between = not self._request_in_progress and not self._messages
        if between and self._header_timer is None and data:
            self._arm()  # the first byte of a kept-alive connection's next request
        if self._header_timer is not None:
            self._header_bytes += len(data)
        super().data_received(data)
        if self._messages or self._request_in_progress:
            self._disarm()  # headers complete: the body has its own timeout

    def _arm(self) -> None:
        """Start the header timer; it replaces aiohttp's idle timer until headers came."""
        self._disarm()
        if self._keepalive_handle is not None:
            self._keepalive_handle.cancel()
            self._keepalive_handle = None
        self._header_bytes = 0
        self._header_timer = self._loop.call_later(
            self._guard.settings.header_timeout_s, self._header_timed_out
        )

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timed_out(self) -> None:
        self._header_timer = None
        transport = self.transport
        if transport is None or self._request_in_progress or self._messages:
            return
        got = self._header_bytes
        self._guard.errors.note(Kind.HEADER_TIMEOUT, f"{got} bytes of headers", self._peer())
        if got:
            with contextlib.suppress(Exception):
                transport.write(raw_response(408, errs.REQUEST_TIMEOUT))
        self.force_close()

    def _process_keepalive(self) -> None:
        idle = self._waiter is not None and not self._waiter.done()
        before = self.transport
        super()._process_keepalive()
        if idle and before is not None and self.transport is None:
            self._guard.errors.note(Kind.IDLE_TIMEOUT)

    def _peer(self) -> str | None:
        transport = self.transport
        peer = transport.get_extra_info("peername") if transport is not None else None
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else None

    # --- JSON instead of aiohttp's text/plain errors --------------------------------

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if request.writer.output_size > 0:
            raise ConnectionError("a response is under way; no error answer can follow")
        errors = self._guard.errors
        peer = self._peer()
        if status == 500:
            errors.note(Kind.INTERNAL, f"{type(exc).__name__}: {exc}", peer)
            if errors.counts[Kind.INTERNAL] == 1:
                log.error("first internal error of this process", exc_info=exc)
            return json_error(500, errs.INTERNAL)
        if status == 400 and _too_large(exc):
            errors.note(Kind.HEADERS_TOO_LARGE, message or "", peer)
            return json_error(431, errs.HEADERS_TOO_LARGE)
        if status == 400:
            errors.note(Kind.BAD_REQUEST, message or "", peer)
            return json_error(400, errs.BAD_REQUEST)
        errors.note(Kind.INTERNAL, f"HTTP {status}", peer)
        body = errs.error_body(http.HTTPStatus(status).phrase, "server_error", None)
        return json_error(status, body)


def _too_large(exc: BaseException | None) -> bool:
    if isinstance(exc, LineTooLong):
        return True
    return isinstance(exc, BadHttpMessage) and "too many headers" in str(exc).lower()


class GuardedServer(Server):
    """aiohttp's `Server` making `GuardedHandler`s."""

    def __init__(self, *args: Any, guard: Guard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.guard = guard

    def __call__(self) -> RequestHandler:
        return GuardedHandler(self, loop=self._loop, guard=self.guard, **self._kwargs)


class GuardedRunner(web.AppRunner):
    """`web.AppRunner` whose listener connections are `GuardedHandler`s."""

    def __init__(self, app: web.Application, *, guard: Guard, **kwargs: Any) -> None:
        super().__init__(app, **kwargs)
        self.guard = guard

    async def _make_server(self) -> Server:
        made = await super()._make_server()
        return GuardedServer(
            made.request_handler,
            request_factory=made.request_factory,
            handler_cancellation=made.handler_cancellation,
            loop=made._loop,
            guard=self.guard,
            **made._kwargs,
        )


async def read_body(
    request: web.Request, limit: int, timeout_s: float, errors: ClientErrors
) -> bytes | web.Response:
    """The whole request body, or the 413/408 answer.

    Each read waits at most `timeout_s` (nginx's `client_body_timeout`: the silence
    between two reads, not the whole transfer); a body over `limit` stops reading."""
    length = request.content_length
    if length is not None and length > limit:
        errors.note(Kind.BODY_TOO_LARGE, f"Content-Length {length}", request.remote)
        return json_error(413, errs.TOO_LARGE)
    content = request.content
    if length is not None and content.is_eof() and content.exception() is None:
        return content.read_nowait()  # all here already: no read loop, no copy
    buf = bytearray()
    while True:
        try:
            async with asyncio.timeout(timeout_s):
                chunk = await content.readany()
        except TimeoutError:
            errors.note(Kind.BODY_TIMEOUT, f"{len(buf)} bytes read", request.remote)
            return json_error(408, errs.REQUEST_TIMEOUT)
        if not chunk:
            break
        buf += chunk
        if len(buf) > limit:
            errors.note(Kind.BODY_TOO_LARGE, f"over {limit} bytes", request.remote)
            return json_error(413, errs.TOO_LARGE)
    return bytes(buf)
