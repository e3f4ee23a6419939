"""The request path for models the routing overlay names: a thin driver of the core.

    table (frozen for this request) + session key -> core.group_route.route
      -> attempt on the chosen provider's backend
      -> failed before any byte reached the client (connect failure, 429, 503) and an
         attempt is left (`overlay.max_attempts`): route again with the tried keys
         (the core keeps the retry in the group, then falls through)
      -> relay the answer with x-grid-provider, x-grid-group, x-grid-picker,
         x-grid-overlay-revision and x-grid-affinity

The session key is the configured header (`affinity.header`), else the body's OpenAI
`user` field (`affinity.user_field`); bindings are the gateway's bounded LRU+TTL
`AffinityTable`, written when an answer below 500 came back. Nothing here reads the
overlay source: the table is the one the watch task last swapped in.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from aiohttp import web

from gridroute.core.group_route import GroupDecision, RouteTable, Slot, route
from gridroute.gateway import proxy, upstream
from gridroute.gateway.overlay_watch import OverlayWatch
from gridroute.gateway.runtime import Gateway
from gridroute.wire import openai_errors as errs


def _session(gw: Gateway, request: web.Request, body: bytes) -> str | None:
    header = gw.affinity_header
    if header is None:
        return None
    value = request.headers.get(header)
    if value:
        return value
    if not gw.cfg.affinity.user_field or b'"user"' not in body:
        return None
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    user = doc.get("user") if isinstance(doc, dict) else None
    return user if isinstance(user, str) and user else None


def _evidence(d: GroupDecision, table: RouteTable, slot: Slot) -> tuple[tuple[str, str], ...]:
    return (
        ("x-grid-provider", slot.key),
        ("x-grid-group", "" if d.group is None else str(d.group)),
        ("x-grid-picker", d.picker.value),
        ("x-grid-overlay-revision", str(table.index.revision)),
        ("x-grid-affinity", d.affinity.value),
        ("x-grid-step", d.step.value),
    )


class _Again(Exception):
    """Internal: the attempt failed before any byte reached the client; `decision` is
    where the next attempt goes (decided before the answer in hand was dropped)."""

    def __init__(self, decision: GroupDecision) -> None:
        self.decision = decision


async def handle(
    gw: Gateway, request: web.Request, body: bytes, model: str, t0: float
) -> web.StreamResponse:
    watch = gw.overlay
    assert watch is not None
    current = gw.current
    clock = current.clock
    table = watch.table(current.health)
    if table is None:  # pragma: no cover - routes() said the overlay names the model
        return proxy.error_response(404, errs.MODEL_NOT_FOUND)
    session = _session(gw, request, body)
    bound = current.affinity.get(session, t0) if session else None
    snap = current.snapshot
    tracer = gw.tracer
    span = None
    if tracer is not None:
        span = tracer.start(request.path, model, current.routing.policies[model])
    fwd = proxy.forward_headers(request)
    tried: frozenset[str] = frozenset()
    attempts = 0
    status = 0
    site = ""
    d: GroupDecision | None = None
    max_attempts = gw.cfg.overlay.max_attempts if gw.cfg.overlay is not None else 1

    def decide(tried: frozenset[str], last: str | None) -> GroupDecision | None:
        return route(
            table,
            model,
            watch.states,
            current.rng,
            session=session is not None,
            bound=bound,
            tried=tried,
            last=last,
            snapshot=snap,
            own=current.own.counts,
        )

    try:
        d = decide(tried, None)
        while True:
            if d is None:  # pragma: no cover - the table names the model
                status = 404
                return proxy.error_response(404, errs.MODEL_NOT_FOUND)
            watch.metrics.pick(d.picker.value, d.group, d.step.value)
            slot = d.slot
            if slot is None:
                status = 503
                return proxy.error_response(503, errs.NO_HEALTHY_SITE, 3)
            if session is not None and attempts == 0:
                watch.metrics.affinity.labels(d.affinity.value).inc()
            site = slot.site
            attempts += 1
            after = tried | {slot.key}

            def elsewhere(
                after: frozenset[str] = after, key: str = slot.key, n: int = attempts
            ) -> GroupDecision | None:
                if n >= max_attempts:
                    return None
                nxt = decide(after, key)
                return nxt if nxt is not None and nxt.slot is not None else None

            try:
                resp = await _attempt(gw, request, slot, body, fwd, elsewhere, d, table)
            except _Again as again:
                tried = after
                d = again.decision
                continue
            status = resp.status
            if session is not None and status < 500:
                current.affinity.put(session, slot.key, clock())
            return resp
    finally:
        gw.metrics.duration(site, status or 499, clock() - t0)
        if span is not None and tracer is not None:
            _trace(span, d, table)
            tracer.end(span, None, site, attempts, status)


def _trace(span: Any, d: GroupDecision | None, table: RouteTable) -> None:
    """The decision's bounded attributes on the request's span."""
    span.set_attribute("grid.overlay.revision", table.index.revision)
    if d is None:
        return
    span.set_attribute("grid.picker", d.picker.value)
    span.set_attribute("grid.affinity", d.affinity.value)
    span.set_attribute("grid.step", d.step.value)
    if d.group is not None:
        span.set_attribute("grid.group", d.group)
    if d.slot is not None:
        span.set_attribute("grid.provider", d.slot.key)
        span.set_attribute("grid.backend", d.slot.provider)


async def _attempt(
    gw: Gateway,
    request: web.Request,
    slot: Slot,
    body: bytes,
    fwd: list[tuple[str, str]],
    elsewhere: Callable[[], GroupDecision | None],
    d: GroupDecision,
    table: RouteTable,
) -> web.StreamResponse:
    """One attempt; exactly one `own.end` for its `own.start`, on every path."""
    current = gw.current
    key = slot.key
    backend = gw.backends.by_key.get(key)
    own = current.own
    own.start(key, current.clock())
    try:
        try:
            if backend is None:
                raise upstream.ConnectFailed("the provider left the config")
            up = await backend.pool.request(request.method, request.raw_path, fwd, body)
        except proxy.BEFORE_ANSWER as exc:
            nxt = elsewhere()
            if nxt is not None:
                gw.metrics.retry(slot.site, upstream.describe(exc))
                raise _Again(nxt) from exc
            if isinstance(exc, upstream.ConnectTimeout):
                return proxy.error_response(504, errs.UPSTREAM_TIMEOUT)
            return proxy.error_response(502, errs.UPSTREAM_FAILED)
        except upstream.ReadTimeout:
            return proxy.error_response(504, errs.UPSTREAM_TIMEOUT)
        except upstream.UpstreamError:
            return proxy.error_response(502, errs.UPSTREAM_FAILED)
        try:
            if up.status in proxy.RETRY_STATUS:
                nxt = elsewhere()
                if nxt is not None:
                    gw.metrics.retry(slot.site, f"status_{up.status}")
                    raise _Again(nxt)
            return await proxy.relay(request, up, slot, _evidence(d, table, slot))
        finally:
            up.release()
    finally:
        own.end(key, current.clock())
        current.changes.wake()


__all__ = ["OverlayWatch", "handle"]
