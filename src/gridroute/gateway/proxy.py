"""The request path: read the model, decide, forward, relay the answer byte for byte.

    body (<= limits.max_body_bytes) -> model -> the core's request flow (core/flow.py),
    with an `OverlayRequest` (gateway/overlay_route.py) when the routing overlay names
    the model (its groups and pickers decide, the same flow retries and falls through):
      Hold     -> wait for a request end or a new snapshot, at most to the deadline
      Attempt  -> own.start -> connect + send -> the failure or the answer's status goes
                  back into the flow, which says: retry elsewhere (once, before any
                  byte went to the client), relay, or give up (502/504)
      Relay    -> headers + body relayed chunk by chunk -> own.end (always, in finally)
      Refuse   -> the gateway's own 429 / 404 / 503

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
from collections.abc import Generator, Iterable, Mapping, Sequence
from typing import Protocol

from aiohttp import web

from gridroute.core import Decision, Outcome, Policy, SiteView
from gridroute.core.fairness import fair_order_on
from gridroute.core.flow import (
    Answered,
    Attempt,
    Failure,
    Feed,
    GiveUp,
    Hold,
    Refuse,
    Relay,
    Step,
    request_flow,
)
from gridroute.core.group_route import GroupDecision
from gridroute.core.overlay_request import OverlayRequest
from gridroute.core.prefix import (
    PrefixAffinitySettings,
    PrefixMap,
    PrefixRequest,
    fingerprint,
    fingerprint_messages,
    load_tokenizer,
)
from gridroute.gateway import overlay_route, upstream
from gridroute.gateway.admission_queue import wait_in_queue
from gridroute.gateway.fairness_key import fairness_key
from gridroute.gateway.request_body import parse_model
from gridroute.gateway.runtime import GATEWAY, Gateway
from gridroute.inbound.client_errors import Kind
from gridroute.inbound.guard import read_body
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


def error_response(status: int, body: bytes, retry_after: int | None = None) -> web.Response:
    headers = None if retry_after is None else {"Retry-After": str(retry_after)}
    return web.Response(status=status, body=body, content_type=errs.CONTENT_TYPE, headers=headers)


REQUEST_ONLY = _HOP_BY_HOP | {"content-encoding"}
"""... and, on a request, `Content-Encoding`: aiohttp's server decodes a compressed
request body (and the data plane hands such a request to it), so what is forwarded is
the decoded body; relayed with the client's `Content-Encoding: gzip`, the backend read
plain JSON as gzip (found by review: the fake backend answered 500)."""


def _strip_set(conn: str | None) -> frozenset[str]:
    """A request's hop-by-hop headers (`REQUEST_ONLY`), plus any the client's
    `Connection` header (`conn`) names."""
    if not conn:
        return REQUEST_ONLY
    extra = {t.strip().lower() for t in conn.split(",")} - {"close", "keep-alive", ""}
    return REQUEST_ONLY | extra if extra else REQUEST_ONLY


def forward_headers(request: web.Request) -> list[tuple[str, str]]:
    """The client's headers minus hop-by-hop ones and every `x-grid-*`."""
    return forward_header_list(request.headers.items(), request.headers.get("Connection"))


def forward_header_list(
    headers: Iterable[tuple[str, str]], connection: str | None
) -> list[tuple[str, str]]:
    """`headers` (in order, as sent) minus hop-by-hop ones, those `connection` (the
    `Connection` header's value) names, and every `x-grid-*`."""
    strip = _strip_set(connection)
    out: list[tuple[str, str]] = []
    for k, v in headers:
        lk = k.lower()
        if lk in strip or lk.startswith("x-grid-"):
            continue
        out.append((k, v))
    return out


Forwarded = list[tuple[str, str]] | bytes
"""The request headers that go upstream: (name, value) pairs, or (the data plane,
which builds them while it parses the head) those pairs as the lines of a head."""

Answer = tuple[int, bytes, int | None]
"""One of the gateway's own answers: status, OpenAI error body, Retry-After (or None)."""


def refusal(d: Decision) -> Answer:
    """The gateway's own answer when a decision routes nowhere (seed PR, "Errors").

    `Retry-After` is the core's (`Decision.retry_after_s`, set on shed and no-site)."""
    if d.outcome is Outcome.SHED:
        return 429, errs.SHED, d.retry_after_s
    if d.outcome is Outcome.UNKNOWN_MODEL:
        return 404, errs.MODEL_NOT_FOUND, None
    return 503, errs.NO_HEALTHY_SITE, d.retry_after_s


def given_up(step: GiveUp) -> Answer:
    """The answer when the last attempt failed before the backend answered: 503
    `no_healthy_site` + Retry-After for a last resort (every site judged down), else
    504 for a timeout and 502 for the rest."""
    if step.status == 503:
        return 503, errs.NO_HEALTHY_SITE, step.retry_after_s
    if step.status == 504:
        return 504, errs.UPSTREAM_TIMEOUT, None
    return step.status, errs.UPSTREAM_FAILED, None


def refuse(d: Decision) -> web.Response:
    """`refusal` as an aiohttp response."""
    return error_response(*refusal(d))


def give_up(step: GiveUp) -> web.Response:
    """`given_up` as an aiohttp response."""
    return error_response(*given_up(step))


async def read_model(request: web.Request, gw: Gateway) -> tuple[bytes, str] | web.Response:
    """The whole body (bounded in size and in time) and its `model`, or the 4xx answer."""
    errors = gw.client_errors
    body = await read_body(request, gw.max_body, gw.cfg.listener.body_timeout_s, errors)
    if isinstance(body, web.Response):
        return body
    got = parse_model(body)
    if isinstance(got, tuple):
        kind, error = got
        errors.note(kind, "", request.remote)
        return error_response(400, error)
    return body, got


def unauthorized(gw: Gateway, request: web.Request) -> web.Response:
    """401 `invalid_api_key` (the key itself is never logged or echoed)."""
    gw.client_errors.note(Kind.UNAUTHORIZED, request.path[:100], request.remote)
    resp = error_response(401, errs.UNAUTHORIZED)
    resp.headers["WWW-Authenticate"] = "Bearer"
    return resp


class Exchange(Protocol):
    """One request as a listener holds it, for `RouteRun`: aiohttp's (`_Web` here) or the
    data plane's (`dataplane.answer.Serving`)."""

    method: str
    target: str
    """The path and query as sent (what goes upstream)."""

    def forward(self) -> Forwarded:
        """The headers to send upstream (`forward_header_list`)."""
        ...

    def answer(self, status: int, body: bytes, retry_after: int | None = None) -> None:
        """One of the gateway's own answers (OpenAI-shaped `body`)."""
        ...

    async def relay(
        self, up: upstream.Response, view: SiteView, extra: Sequence[tuple[str, str]]
    ) -> int:
        """The backend's answer relayed to the client; its status."""
        ...


class _Web:
    """`Exchange` on aiohttp: `resp` is what the handler returns."""

    __slots__ = ("method", "request", "resp", "target")

    def __init__(self, request: web.Request) -> None:
        self.request = request
        self.method = request.method
        self.target = request.raw_path
        self.resp: web.StreamResponse | None = None

    def forward(self) -> list[tuple[str, str]]:
        return forward_headers(self.request)

    def answer(self, status: int, body: bytes, retry_after: int | None = None) -> None:
        self.resp = error_response(status, body, retry_after)

    async def relay(
        self, up: upstream.Response, view: SiteView, extra: Sequence[tuple[str, str]]
    ) -> int:
        self.resp = await _relay(self.request, up, view, extra)
        return self.resp.status


async def handle(request: web.Request) -> web.StreamResponse:
    """aiohttp handler of every routed OpenAI endpoint: drives the core's request flow."""
    gw = request.app[GATEWAY]
    t0 = gw.current.monotonic()
    if gw.api_keys is not None and not gw.api_keys.allows(request):
        return unauthorized(gw, request)
    if gw.draining:
        going = error_response(503, errs.SHUTTING_DOWN, 1)
        going.force_close()  # a kept-alive client learns it must reconnect elsewhere
        return going
    got = await read_model(request, gw)
    if isinstance(got, web.Response):
        return got
    body, model = got
    ex = _Web(request)
    run = open_run(gw, ex, request.path, request.headers, request.remote, body, model, t0)
    if run is not None:
        await drive(run)
    assert ex.resp is not None
    return ex.resp


class RouteRun:
    """One request's way through the flow once its body and `model` are read, without
    I/O: the decision's bookkeeping (metrics, refusal counts, overlay counts, the
    trace), its attempts and its end. Two drivers carry it out: `drive` (a coroutine,
    for aiohttp's listener and any request that has to wait) and the data plane's
    `Splice` (callbacks, for an attempt on a kept-alive connection: no task, no
    future). Both call these methods in the same order, so there is one flow glue:
    `first`, `decided`, then `book` per step until it returns None or an attempt is
    relayed (`relayed`), each attempt closed by `attempt_end`; `finish` always, once."""

    __slots__ = (
        "attempts",
        "body",
        "child",
        "choice",
        "current",
        "d",
        "ex",
        "finished",
        "flow",
        "fwd",
        "gw",
        "headers",
        "model",
        "overlay",
        "owed",
        "policy",
        "preferred",
        "prefix",
        "remote",
        "sent",
        "session",
        "site",
        "span",
        "status",
        "t0",
        "watch",
    )

    def __init__(
        self,
        gw: Gateway,
        ex: Exchange,
        path: str,
        headers: Mapping[str, str],
        remote: str | None,
        body: bytes,
        model: str,
        t0: float,
        policy: Policy,
    ) -> None:
        self.gw = gw
        self.ex = ex
        self.headers = headers
        self.remote = remote
        self.body = body
        self.model = model
        self.t0 = t0
        self.policy = policy
        current = self.current = gw.current
        tracer = gw.tracer
        self.span = tracer.start(path, model, policy) if tracer is not None else None
        self.child: object | None = None
        self.d: Decision | None = None
        self.site = ""
        self.status = 0
        self.attempts = 0
        self.sent: list[float] = []  # when each attempt was handed to a backend
        self.finished = False
        self.owed: Attempt | None = None
        """An attempt whose `own.start` was made and whose `own.end` is the driver's."""
        self.flow: Generator[Step, Feed, None] | None = None
        self.fwd: Forwarded = []
        watch = self.watch = gw.overlay
        by_overlay = (
            overlay_route.request_for(gw, headers, body, model, t0) if watch is not None else None
        )
        self.overlay: OverlayRequest | None = None
        self.choice: GroupDecision | None = None
        self.prefix: PrefixRequest | None = None
        if by_overlay is not None:
            self.overlay, self.session = by_overlay
            self.preferred = None
        else:
            session = self.session = headers.get(gw.affinity_header) if gw.affinity_header else None
            self.preferred = current.affinity.get(session, t0) if session else None
            self.prefix = prefix_of(body, current.prefixes, gw.cfg.prefix_affinity, t0)

    def first(self) -> Step:
        """The flow's first step (maybe a `Hold`, for `wait_in_queue`)."""
        current = self.current
        who = None  # the key is read only where fair order ranks it (the flow's own test)
        overlay = self.overlay
        if fair_order_on(current.snapshot.settings, self.policy, overlay is not None):
            who = fairness_key(self.gw.cfg.fairness_key, self.headers, self.remote, self.body)
        flow = self.flow = request_flow(
            current, self.model, self.policy, self.preferred, overlay, who, self.prefix
        )
        return next(flow)

    def decided(self, step: Step) -> None:
        """The first step past any hold: affinity and prefix outcomes, forwarded headers."""
        self.d = step.decision
        metrics = self.gw.metrics
        if self.session and self.overlay is None:
            metrics.affinity(self.preferred, self.d)
        if self.prefix is not None:
            metrics.prefix(self.prefix.outcome)
        self.fwd = self.ex.forward()

    def book(self, step: Step) -> Attempt | None:
        """`step` counted; a refusal or a give-up answered (None), else the attempt to
        make, with its trace span open."""
        gw = self.gw
        if isinstance(step, Attempt | Refuse):
            d = self.d = step.decision
            gw.metrics.decision(d)
            gw.refusals.note(self.model, d.outcome)
            watch = self.watch
            if step.choice is not None and watch is not None:
                self.choice = step.choice
                overlay_route.count(
                    watch, step.choice, self.attempts == 0, self.session is not None
                )
        if isinstance(step, Refuse):
            assert self.d is not None
            status, err, after = refusal(self.d)
            self.status = status
            self.ex.answer(status, err, after)
            return None
        if isinstance(step, GiveUp):
            status, err, after = given_up(step)
            self.status = status
            self.ex.answer(status, err, after)
            return None
        assert isinstance(step, Attempt), step  # a Relay is carried out by the attempt
        if step.after is not None:
            gw.metrics.retry(*step.after)
        self.site = step.view.site
        self.attempts += 1
        tracer = gw.tracer
        if tracer is not None:
            self.child = tracer.attempt(self.span, step.decision, self.attempts)
        return step

    def attempt_end(self, got: int | Step | None) -> None:
        """The current attempt's span closed: `got` is the relayed status or the next step."""
        child, self.child = self.child, None
        tracer = self.gw.tracer
        if child is not None and tracer is not None:
            answered = got if isinstance(got, int) else None
            after = got.after if isinstance(got, Attempt) else None
            tracer.attempt_end(child, answered, None if after is None else after[1])

    def relayed(self, att: Attempt, status: int) -> None:
        """The backend's answer went to the client (an affinity kept below 500)."""
        self.status = status
        session = self.session
        if session and status < 500:
            self.current.affinity.put(session, att.view.key, self.current.monotonic())

    def abandon(self) -> None:
        """The driver's task was cancelled before it ran: settle what it owed."""
        owed, self.owed = self.owed, None
        if owed is not None:
            self.current.own.end(owed.view.key, self.current.clock(), self.model)
            self.current.changes.wake()
        self.attempt_end(None)
        self.finish()

    def finish(self) -> None:
        """Metrics, trace and the flow's end, on every path (a second call does nothing)."""
        if self.finished:
            return
        self.finished = True
        flow = self.flow
        if flow is not None:
            flow.close()  # at once, not at garbage collection: an abandoned trial is freed
        metrics = self.gw.metrics
        if self.sent:
            metrics.added(self.sent[-1] - self.t0)
        metrics.duration(self.site, self.status or 499, self.current.monotonic() - self.t0)
        span = self.span
        tracer = self.gw.tracer
        if span is not None and tracer is not None:
            if self.overlay is not None:
                overlay_route.trace(span, self.choice, self.overlay.table)
            tracer.end(span, self.d, self.site, self.attempts, self.status, self.prefix)


def open_run(
    gw: Gateway,
    ex: Exchange,
    path: str,
    headers: Mapping[str, str],
    remote: str | None,
    body: bytes,
    model: str,
    t0: float,
) -> RouteRun | None:
    """The request's run (the flow of one request whose body and `model` are read, for
    either listener), or None with 404 answered for a model no policy names."""
    policy = gw.current.routing.policies.get(model)
    if policy is None:
        gw.metrics.duration("", 404, gw.current.monotonic() - t0)
        ex.answer(404, errs.MODEL_NOT_FOUND)
        return None
    return RouteRun(gw, ex, path, headers, remote, body, model, t0, policy)


async def drive(
    run: RouteRun, att: Attempt | None = None, *, held: Hold | None = None, started: bool = False
) -> None:
    """`run` carried out as a coroutine: from its start, from its first step (`held`,
    a hold), or from an attempt already booked (`att`; `started`: its `own.start` made,
    its request to be sent again)."""
    try:
        if att is None:
            step = run.first() if held is None else held
            if isinstance(step, Hold):  # no coroutine for the common case, a step at once
                step = await wait_in_queue(run.flow, step, run.current)  # type: ignore[arg-type]
            run.decided(step)
            att = run.book(step)
        while att is not None:
            got: int | Step | None = None
            try:
                got = await _attempt(run, att, started=started)
            finally:
                run.attempt_end(got)
            started = False
            if isinstance(got, int):
                run.relayed(att, got)
                return
            att = run.book(got)
    finally:
        run.finish()


def prefix_of(
    body: bytes, table: PrefixMap, s: PrefixAffinitySettings, now: float
) -> PrefixRequest | None:
    """The request's prefix (`core/prefix.py`), or None when prefix affinity is off, the
    body has no `messages`, or they are shorter than one block (a server caches whole
    pages, so such a prompt has nothing to reuse; its outcome is not counted).

    The rendered messages are the body's bytes from its `"messages"` key on, as the
    client wrote them: a chat client resends its history the same way, so its turns
    share their leading blocks, and the body is fingerprinted without decoding it
    again (fields after the messages only change the last blocks).

    With `tokenizer` set (the tokenizer-exact mode) the body is decoded once more, its
    `messages` rendered as a chat template would and encoded once, and blocks of
    `block_tokens` ids are hashed (`fingerprint_messages`); a body that is not a JSON
    object with a `messages` list gets no prefix."""
    if not s.enabled:
        return None
    at = body.find(b'"messages"')
    if at < 0:
        return None
    if s.tokenizer is not None:
        try:
            doc = json.loads(body)
        except ValueError:
            return None
        messages = doc.get("messages") if isinstance(doc, dict) else None
        if not isinstance(messages, list):
            return None
        encode = load_tokenizer(s.tokenizer)  # loaded (and checked) with the config
        blocks = fingerprint_messages(messages, encode, s.block_tokens, s.max_blocks)
    else:
        end = at + s.block_bytes * s.max_blocks
        blocks = fingerprint(body[at:end], s.block_bytes, s.max_blocks)
    # shorter than one block: nothing a server could have cached, so no affinity at all
    return PrefixRequest.start(blocks, s, table, now) if blocks else None


def failure_of(exc: upstream.UpstreamError) -> Failure:
    """The flow's name for a backend failure before its answer's headers."""
    if isinstance(exc, upstream.ConnectTimeout):
        return Failure.CONNECT_TIMEOUT
    if isinstance(exc, upstream.Reset):
        return Failure.RESET
    if isinstance(exc, upstream.Disconnected):
        return Failure.DISCONNECTED
    if isinstance(exc, upstream.ConnectFailed):
        return Failure.CONNECT_FAILED
    if isinstance(exc, upstream.ReadTimeout):
        return Failure.READ_TIMEOUT
    return Failure.BROKEN


async def _attempt(run: RouteRun, step: Attempt, *, started: bool = False) -> int | Step:
    """One attempt on one site: the relayed answer's status, or the flow's next step.

    Exactly one `own.end` for its `own.start`, on every path (cancellation included);
    `started`: the data plane's `Splice` made the `own.start` and its send found the
    kept-alive connection closed (the idle race): the request goes again here.
    A connection lost or refused before the answer (what a backend going away looks
    like) may have reached the backend; the flow retries it once elsewhere anyway:
    re-running a generation costs compute, a client error costs the request.
    Appends to `sent` when the request is handed to the backend pool (added latency).
    Under the overlay the relayed answer carries the choice's evidence headers."""
    gw = run.gw
    ex = run.ex
    flow = run.flow
    assert flow is not None
    current = run.current
    view = step.view
    key = view.key
    backend = gw.backends.by_key.get(key)
    own = current.own
    clock = current.clock
    model = run.model
    if not started:
        own.start(key, clock(), model)
    else:
        run.owed = None  # this attempt's own.end is made below
    try:
        try:
            if backend is None:
                # The config was reloaded between the decision and now: unreachable.
                raise upstream.ConnectFailed("the site left the config")
            if not started:
                run.sent.append(clock())
            up = await backend.pool.request(ex.method, ex.target, run.fwd, run.body, resend=started)
        except upstream.UpstreamError as exc:
            return flow.send(failure_of(exc))
        try:
            nxt = flow.send(Answered(up.status))
            if isinstance(nxt, Relay):
                return await ex.relay(up, view, evidence(run, step))
            return nxt
        finally:
            up.release()
    finally:
        own.end(key, clock(), model)
        current.changes.wake()


def evidence(run: RouteRun, step: Attempt) -> Sequence[tuple[str, str]]:
    """The headers a relayed answer carries beyond the backend's: under the overlay,
    the choice's evidence."""
    choice = step.choice
    overlay = run.overlay
    if overlay is not None and choice is not None:
        return overlay_route.evidence(choice, overlay.table)
    return ()


class _Answer(web.StreamResponse):
    """A relayed answer: its headers wait in the writer for the body's first bytes, so
    headers and a body already here leave in one write (aiohttp's `StreamResponse`
    writes them on `prepare`, which costs a second send). `_relay` flushes them at once
    when no body byte is here yet, so a client still learns the status right away."""

    _send_headers_immediately = False


def _fill_headers(
    resp: web.StreamResponse,
    up: upstream.Response,
    view: SiteView,
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
    view: SiteView,
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
