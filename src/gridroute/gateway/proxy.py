"""The request path: read the model, decide, forward, relay the answer byte for byte.

    body (<= limits.max_body_bytes) -> model -> admit (decide, maybe hold) -> attempt
    attempt: own.start -> connect + send -> status 429/503 or connect failure?
               -> once, before any byte went to the client: decide again excluding
                  the sites tried, and attempt there
             -> headers + body relayed chunk by chunk -> own.end (always, in finally)

Nothing here awaits the operator or a metrics endpoint: the decision reads the
snapshot the signals loop last published. The client's bytes go upstream unchanged
except hop-by-hop headers and `x-grid-*` (never trusted from a client); the
backend's bytes come back unchanged (no decompression), with `x-grid-site` and
`x-grid-backend` added. A client that goes away cancels this handler (the runner
sets `handler_cancellation`), which closes the upstream connection, so the backend
stops generating.

Errors the gateway makes itself are OpenAI-shaped (`gridroute.wire.openai_errors`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Protocol

from aiohttp import web

from gridroute.core import Decision, Outcome, Policy, SiteView, Snapshot, decide
from gridroute.gateway import overlay_route, upstream
from gridroute.gateway.admission_queue import admit
from gridroute.gateway.runtime import GATEWAY, Gateway
from gridroute.wire import openai_errors as errs

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
        "expect",
    }
)
_RETRY_STATUS = frozenset({429, 503})
_BEFORE_ANSWER = (upstream.ConnectFailed, upstream.ConnectTimeout, upstream.Disconnected)
"""Failures before the backend answered anything: retried once elsewhere. Besides
connect errors and connect timeouts (a partitioned site), this includes a pooled
keep-alive connection reset or closed before the answer's headers, which is what a
backend that is going away looks like. Such a request may have reached the dying
backend; re-running a generation costs compute, a client error costs the request."""
BEFORE_ANSWER = _BEFORE_ANSWER
RETRY_STATUS = _RETRY_STATUS


def error_response(status: int, body: bytes, retry_after: int | None = None) -> web.Response:
    headers = None if retry_after is None else {"Retry-After": str(retry_after)}
    return web.Response(status=status, body=body, content_type=errs.CONTENT_TYPE, headers=headers)


def _strip_set(request: web.Request) -> frozenset[str]:
    """Hop-by-hop headers, plus any the client's `Connection` header names."""
    conn = request.headers.get("Connection")
    if not conn:
        return _HOP_BY_HOP
    extra = {t.strip().lower() for t in conn.split(",")} - {"close", "keep-alive", ""}
    return _HOP_BY_HOP | extra if extra else _HOP_BY_HOP


def forward_headers(request: web.Request) -> list[tuple[str, str]]:
    """The client's headers minus hop-by-hop ones and every `x-grid-*`."""
    strip = _strip_set(request)
    out: list[tuple[str, str]] = []
    for k, v in request.headers.items():
        lk = k.lower()
        if lk in strip or lk.startswith("x-grid-"):
            continue
        out.append((k, v))
    return out


def refuse(d: Decision) -> web.Response:
    """The gateway's own answer when a decision routes nowhere (seed PR, "Errors").

    `Retry-After` is the core's (`Decision.retry_after_s`, set on shed and no-site)."""
    if d.outcome is Outcome.SHED:
        return error_response(429, errs.SHED, d.retry_after_s)
    if d.outcome is Outcome.UNKNOWN_MODEL:
        return error_response(404, errs.MODEL_NOT_FOUND)
    return error_response(503, errs.NO_HEALTHY_SITE, d.retry_after_s)


async def read_model(request: web.Request, limit: int) -> tuple[bytes, str] | web.Response:
    """The whole body (bounded) and its `model`, or the 400/413 answer."""
    length = request.content_length
    if length is not None and length > limit:
        return error_response(413, errs.TOO_LARGE)
    if length is not None:
        content = request.content
        if content.is_eof() and content.exception() is None:
            body = content.read_nowait()  # all here already: no read loop, no copy
        else:
            body = await request.read()
    else:  # chunked: count as it arrives, stop at the limit
        buf = bytearray()
        async for chunk in request.content.iter_any():
            buf += chunk
            if len(buf) > limit:
                return error_response(413, errs.TOO_LARGE)
        body = bytes(buf)
    try:
        doc = json.loads(body)
    except ValueError:
        return error_response(400, errs.INVALID_JSON)
    model = doc.get("model") if isinstance(doc, dict) else None
    if not isinstance(model, str) or not model:
        return error_response(400, errs.MISSING_MODEL)
    return body, model


class _Retry(Exception):
    """Internal: this attempt failed before any byte reached the client; try `decision`."""

    def __init__(self, decision: Decision) -> None:
        self.decision = decision


async def handle(request: web.Request) -> web.StreamResponse:
    """aiohttp handler of every routed OpenAI endpoint."""
    gw = request.app[GATEWAY]
    clock = gw.current.monotonic  # durations and affinity idle times: never the wall clock
    t0 = clock()
    if gw.draining:
        return error_response(503, errs.SHUTTING_DOWN, 1)
    got = await read_model(request, gw.max_body)
    if isinstance(got, web.Response):
        return got
    body, model = got
    current = gw.current
    if gw.overlay is not None and gw.overlay.routes(model):
        return await overlay_route.handle(gw, request, body, model, t0)
    policy = current.routing.policies.get(model)
    if policy is None:
        gw.metrics.duration("", 404, clock() - t0)
        return error_response(404, errs.MODEL_NOT_FOUND)
    tracer = gw.tracer
    span = tracer.start(request.path, model, policy) if tracer is not None else None
    d: Decision | None = None
    site = ""
    status = 0
    attempts = 0
    session = request.headers.get(gw.affinity_header) if gw.affinity_header else None
    preferred = current.affinity.get(session, t0) if session else None
    try:
        d, snap = await admit(current, model, policy, affinity=preferred)
        if session:
            gw.metrics.affinity(preferred, d)
        fwd = forward_headers(request)
        path_qs = request.raw_path
        tried: frozenset[str] = frozenset()
        resp: web.StreamResponse
        while True:
            gw.metrics.decision(d)
            gw.refusals.note(model, d.outcome)
            view = d.view
            if d.outcome is not Outcome.ROUTE or view is None:
                resp = refuse(d)
                status = resp.status
                return resp
            site = view.site
            attempts += 1
            try:
                resp = await _attempt(
                    gw, request, view, path_qs, body, fwd, model, policy, snap, tried
                )
                status = resp.status
                if session and status < 500:
                    current.affinity.put(session, view.key, clock())
                return resp
            except _Retry as r:
                tried = tried | {view.key}
                d = r.decision
    finally:
        gw.metrics.duration(site, status or 499, clock() - t0)
        if span is not None and tracer is not None:
            tracer.end(span, d, site, attempts, status)


def _next(
    gw: Gateway,
    snap: Snapshot,
    model: str,
    policy: Policy,
    exclude: frozenset[str],
) -> Decision | None:
    """Where a retry goes: another eligible site on the request's snapshot, or nowhere."""
    d = decide(
        snap, model, gw.current.rng, policy, gw.current.own.counts, can_hold=False, exclude=exclude
    )
    return d if d.outcome is Outcome.ROUTE and d.view is not None else None


async def _attempt(
    gw: Gateway,
    request: web.Request,
    view: SiteView,
    path_qs: str,
    body: bytes,
    fwd: list[tuple[str, str]],
    model: str,
    policy: Policy,
    snap: Snapshot,
    tried: frozenset[str],
) -> web.StreamResponse:
    """One attempt on one site; exactly one `own.end` for its `own.start`, on every path."""
    current = gw.current
    key = view.key
    may_retry = not tried
    backend = gw.backends.by_key.get(key)
    own = current.own
    own.start(key, current.clock())
    try:
        try:
            if backend is None:
                # The config was reloaded between the decision and now: unreachable.
                raise upstream.ConnectFailed("the site left the config")
            up = await backend.pool.request(request.method, path_qs, fwd, body)
        except _BEFORE_ANSWER as exc:
            nxt = _next(gw, snap, model, policy, tried | {key}) if may_retry else None
            if nxt is not None:
                gw.metrics.retry(view.site, upstream.describe(exc))
                raise _Retry(nxt) from exc
            if isinstance(exc, upstream.ConnectTimeout):
                return error_response(504, errs.UPSTREAM_TIMEOUT)
            return error_response(502, errs.UPSTREAM_FAILED)
        except upstream.ReadTimeout:
            return error_response(504, errs.UPSTREAM_TIMEOUT)
        except upstream.UpstreamError:
            return error_response(502, errs.UPSTREAM_FAILED)
        try:
            if up.status in _RETRY_STATUS and may_retry:
                nxt = _next(gw, snap, model, policy, tried | {key})
                if nxt is not None:
                    gw.metrics.retry(view.site, f"status_{up.status}")
                    raise _Retry(nxt)
            return await _relay(request, up, view)
        finally:
            up.release()
    finally:
        own.end(key, current.clock())
        current.changes.wake()


class _Answer(web.StreamResponse):
    """A relayed answer: its headers wait in the writer for the body's first bytes, so
    headers and a body already here leave in one write (aiohttp's `StreamResponse`
    writes them on `prepare`, which costs a second send). `_relay` flushes them at once
    when no body byte is here yet, so a client still learns the status right away."""

    _send_headers_immediately = False


class Named(Protocol):
    """Where an answer came from: a `SiteView`, or an overlay's `Slot`."""

    @property
    def site(self) -> str: ...

    @property
    def provider(self) -> str: ...


def _fill_headers(
    resp: web.StreamResponse,
    up: upstream.Response,
    view: Named,
    extra: Sequence[tuple[str, str]] = (),
) -> None:
    """The backend's headers minus hop-by-hop ones, with this gateway's `x-grid-*`
    (and `extra`), written into `resp`'s own table (a table passed to `StreamResponse`
    is copied)."""
    add = resp.headers.add
    for k, v in up.headers:
        lk = k.lower()
        if lk in _HOP_BY_HOP or lk.startswith("x-grid-"):
            continue
        add(k, v)
    add("x-grid-site", view.site)
    add("x-grid-backend", view.provider)
    for k, v in extra:
        add(k, v)
    if up.content_length is not None and not up.chunked:
        resp.content_length = up.content_length


async def _relay(
    request: web.Request,
    up: upstream.Response,
    view: Named,
    extra: Sequence[tuple[str, str]] = (),
) -> web.StreamResponse:
    """Status, headers and body of the backend's answer, chunk by chunk, with backpressure.

    `resp.write` waits for the client's socket to drain past aiohttp's high-water mark,
    and `readany` reads from a bounded buffer that pauses the backend socket, so a slow
    client slows its backend stream instead of filling memory. A backend that fails
    mid-body, or stays silent for `read_timeout_s` (the pool's lazy timer), cuts the
    client connection: a truncated answer must not look complete.
    """
    resp = _Answer(status=up.status, reason=up.reason)
    _fill_headers(resp, up, view, extra)
    if up.is_eof():
        # The whole body came with the headers (a small non-streamed answer): one
        # write of headers and body, no relay loop.
        await resp.prepare(request)
        await resp.write_eof(up.read_nowait())
        return resp
    await resp.prepare(request)  # the headers wait for the first bytes (or the flush below)
    last = b""  # the body's final piece goes out with the end (one write, not two)
    try:
        chunk = up.read_nowait()  # what came with the headers leaves with them
        if not chunk:
            await resp.write(b"")  # nothing yet: the headers go now
            chunk = await up.readany()
        while chunk:
            if up.at_eof():
                last = chunk
                break
            await resp.write(chunk)
            chunk = await up.readany()
    except upstream.UpstreamError:
        # Cut the client connection: aiohttp then skips the final chunk, so the client
        # sees a truncated answer rather than a complete-looking one. No traceback: a
        # backend dying mid-stream is an event (counted by status class), not a bug.
        transport = request.transport
        if transport is not None:
            transport.abort()
        return resp
    await resp.write_eof(last)
    return resp


relay = _relay
"""The relay, for the overlay's request path (`gateway.overlay_route`)."""
