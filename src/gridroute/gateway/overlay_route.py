"""What the request path adds for models the routing overlay names: its inputs and evidence.

There is no second request loop here: `gateway/proxy.py` drives the one request flow
(`core/flow.py`) for every request, and for a model the overlay names it hands the flow
an `OverlayRequest` made here:

    the table the watch task last swapped in (joined with the probe verdicts), frozen for
    this request, its retries included
    + the session key: the configured header (`affinity.header`), else the body's OpenAI
      `user` field (`affinity.user_field`), and the binding it names in the bounded
      LRU+TTL `AffinityTable` (written by proxy.py when an answer below 500 came back)
    + `overlay.max_attempts`

The flow then decides the binding / best viable group / picker, retries in the group and
falls through (`core/overlay_request.py`, `core/group_route.py`). What comes back to the
client and to metrics and traces is bounded evidence of each choice: `x-grid-provider`,
`x-grid-group`, `x-grid-picker`, `x-grid-overlay-revision`, `x-grid-affinity` and
`x-grid-step`. Nothing here reads the overlay source.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gridroute.core.group_route import GroupDecision, RouteTable
from gridroute.core.overlay_request import OverlayRequest
from gridroute.gateway.overlay_watch import OverlayWatch
from gridroute.gateway.runtime import Gateway


def _session(gw: Gateway, headers: Mapping[str, str], body: bytes) -> str | None:
    header = gw.affinity_header
    if header is None:
        return None
    value = headers.get(header)
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


def request_for(
    gw: Gateway, headers: Mapping[str, str], body: bytes, model: str, t0: float
) -> tuple[OverlayRequest, str | None] | None:
    """The overlay inputs of this request (`headers`: its headers, case-insensitive)
    and its session key; None when the overlay does not name `model` (the config's
    `models:` routing applies)."""
    watch = gw.overlay
    if watch is None or not watch.routes(model):
        return None
    current = gw.current
    table = watch.table(current.health)
    if table is None:  # pragma: no cover - routes() said an overlay is serving
        return None
    session = _session(gw, headers, body)
    bound = current.affinity.get(session, t0) if session else None
    cfg = gw.cfg.overlay
    attempts = cfg.max_attempts if cfg is not None else 1
    overlay = OverlayRequest(
        table, watch.states, session is not None, bound, attempts, watch.routed
    )
    return overlay, session


def evidence(choice: GroupDecision, table: RouteTable) -> tuple[tuple[str, str], ...]:
    """The response headers of an answer routed by the overlay."""
    slot = choice.slot
    return (
        ("x-grid-provider", "" if slot is None else slot.key),
        ("x-grid-group", "" if choice.group is None else str(choice.group)),
        ("x-grid-picker", choice.picker.value),
        ("x-grid-overlay-revision", str(table.index.revision)),
        ("x-grid-affinity", choice.affinity.value),
        ("x-grid-step", choice.step.value),
    )


def count(watch: OverlayWatch, choice: GroupDecision, first: bool, session: bool) -> None:
    """One decision of the overlay in `grid_route_overlay_picks_total` (and, for the
    first attempt of a request with a session key, `..._affinity_total`)."""
    watch.metrics.pick(choice.picker.value, choice.group, choice.step.value)
    if first and session and choice.slot is not None:
        watch.metrics.affinity.labels(choice.affinity.value).inc()


def trace(span: Any, choice: GroupDecision | None, table: RouteTable) -> None:
    """The decision's bounded attributes on the request's span (never a session id)."""
    if not span.is_recording():  # not sampled: nothing would be kept
        return
    span.set_attribute("grid.overlay.revision", table.index.revision)
    if choice is None:
        return
    span.set_attribute("grid.picker", choice.picker.value)
    span.set_attribute("grid.affinity", choice.affinity.value)
    span.set_attribute("grid.step", choice.step.value)
    if choice.group is not None:
        span.set_attribute("grid.group", choice.group)
    if choice.slot is not None:
        span.set_attribute("grid.provider", choice.slot.key)
        span.set_attribute("grid.backend", choice.slot.provider)


__all__ = ["count", "evidence", "request_for", "trace"]
