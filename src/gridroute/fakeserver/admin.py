"""The fake server's operational endpoints: `/health`, `/metrics` and `/admin/*`.

The admin controls exist so tests and the demo can make a site fail, stall or change
capacity on cue, and read back exactly what the server did (`/admin/stats`). They keep
answering while the model API fails or stalls, so a test can always recover the server.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gridroute.fakeserver import openai_shapes as shapes
from gridroute.fakeserver.served_model import FakeEngine
from gridroute.fakeserver.state import STATE

routes = web.RouteTableDef()


def _bad(message: str) -> web.Response:
    return web.Response(
        status=400,
        body=shapes.error(message, "invalid_request_error", "invalid_admin_request"),
        content_type="application/json",
    )


async def _json_body(request: web.Request) -> dict[str, Any] | web.Response:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except ValueError as exc:
        return _bad(f"body is not valid JSON: {exc}")
    return body if isinstance(body, dict) else _bad("body must be a JSON object")


def _ok(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE].stats())


@routes.get("/health")
async def health(request: web.Request) -> web.Response:
    st = request.app[STATE]
    if st.pause_metrics:
        await st.gate()
    if st.fail_status is not None:
        return web.json_response({"status": "failing"}, status=503)
    return web.json_response({"status": "ok"})


@routes.get("/metrics")
async def metrics(request: web.Request) -> web.Response:
    st = request.app[STATE]
    if st.pause_metrics:
        await st.gate()
    if st.metrics_status is not None:
        return web.Response(status=st.metrics_status, text="injected metrics failure\n")
    return web.Response(
        body=generate_latest(st.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


@routes.get("/admin/stats")
async def stats(request: web.Request) -> web.Response:
    return _ok(request)


@routes.post("/admin/fail")
async def fail(request: web.Request) -> web.Response:
    """`{"status": 503, "retry_after_s": null}`: every model request answers `status`."""
    body = await _json_body(request)
    if isinstance(body, web.Response):
        return body
    status = body.get("status", 503)
    retry = body.get("retry_after_s")
    if not isinstance(status, int) or not 400 <= status <= 599:
        return _bad(f"status must be an integer 400..599, got {status!r}")
    if retry is not None and (not isinstance(retry, int) or retry < 0):
        return _bad(f"retry_after_s must be a non-negative integer, got {retry!r}")
    request.app[STATE].fail(status, retry)
    return _ok(request)


@routes.post("/admin/pause")
async def pause(request: web.Request) -> web.Response:
    """`{"metrics": false}`: answers stall; with metrics true, /metrics and /health too."""
    body = await _json_body(request)
    if isinstance(body, web.Response):
        return body
    request.app[STATE].pause(metrics=body.get("metrics") is True)
    return _ok(request)


@routes.post("/admin/recover")
async def recover(request: web.Request) -> web.Response:
    request.app[STATE].recover()
    return _ok(request)


async def _count_per_model(
    request: web.Request, field: str
) -> tuple[int, list[FakeEngine]] | web.Response:
    """The body's non-negative integer `field` and the engines it applies to (the
    body's `model`, or every model when it is null); an OpenAI-shaped 400 otherwise."""
    body = await _json_body(request)
    if isinstance(body, web.Response):
        return body
    n = body.get(field)
    model = body.get("model")
    st = request.app[STATE]
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        return _bad(f"{field} must be a non-negative integer, got {n!r}")
    if model is not None and model not in st.engines:
        return _bad(f"model {model!r} is not served here; served: {sorted(st.engines)}")
    return n, [eng for name, eng in st.engines.items() if model is None or name == model]


@routes.post("/admin/slots")
async def slots(request: web.Request) -> web.Response:
    """`{"slots": N, "model": null}`: change capacity of one model, or of all."""
    got = await _count_per_model(request, "slots")
    if isinstance(got, web.Response):
        return got
    n, engines = got
    for eng in engines:
        eng.pool.resize(n)
    return _ok(request)


@routes.post("/admin/external")
async def external(request: web.Request) -> web.Response:
    """`{"in_flight": N, "model": null}`: N requests from clients that bypass every
    gateway hold slots (and show in /metrics) until set again; 0 clears."""
    got = await _count_per_model(request, "in_flight")
    if isinstance(got, web.Response):
        return got
    n, engines = got
    for eng in engines:
        eng.pool.set_external(n)
    return _ok(request)


@routes.post("/admin/metrics")
async def metrics_fault(request: web.Request) -> web.Response:
    """`{"status": 500}`: /metrics answers `status` while requests are still served;
    `{"status": null}` (or `/admin/recover`) restores it."""
    body = await _json_body(request)
    if isinstance(body, web.Response):
        return body
    status = body.get("status", 500)
    if status is not None and (not isinstance(status, int) or not 400 <= status <= 599):
        return _bad(f"status must be an integer 400..599 or null, got {status!r}")
    request.app[STATE].metrics_status = status
    return _ok(request)
