"""The gateway's HTTP surface: the OpenAI API, probes, status, and the metrics listener.

POST /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses -> proxy
GET  /v1/models   the configured models some ready candidate serves (OpenAI list)
GET  /v1/models/{id}  one of them (OpenAI "retrieve model"), 404 `model_not_found` else
GET  /healthz     liveness: the process answers
GET  /readyz      200 once the first operator poll and first probe round completed
GET  /grid/status the grid as this gateway sees it (JSON)
GET  /grid/history the last minutes of it at one-second resolution (JSON)
GET  /metrics     on the separate `metrics.listen` app only
any other method on these paths: 405 with `Allow`; any other path: 404 (both JSON)
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gridroute.gateway import proxy
from gridroute.gateway.runtime import GATEWAY, Gateway
from gridroute.gateway.status import status
from gridroute.inbound.client_errors import Kind
from gridroute.inbound.guard import json_error
from gridroute.wire import openai_errors as errs

ROUTED_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
_NO_LIMIT = 1 << 62
"""aiohttp's own body limit is off: `proxy.read_model` enforces the configured one with
an OpenAI-shaped 413, and it follows reloads."""


def _served(gw: Gateway) -> list[dict[str, object]]:
    """The OpenAI model objects of every configured model some ready candidate serves."""
    snap = gw.current.snapshot
    created = int(gw.started_at)
    data: list[dict[str, object]] = []
    for model in gw.current.routing.policies:
        plan = snap.plan(model)
        if plan is not None and plan.front is not None:
            data.append(
                {"id": model, "object": "model", "created": created, "owned_by": "gridroute"}
            )
    return data


def _locked(request: web.Request) -> web.Response | None:
    """The 401 answer when API keys are on and the request has none of them."""
    gw: Gateway = request.app[GATEWAY]
    if gw.api_keys is None or gw.api_keys.allows(request):
        return None
    return proxy.unauthorized(gw, request)


async def list_models(request: web.Request) -> web.Response:
    if (refused := _locked(request)) is not None:
        return refused
    return web.json_response({"object": "list", "data": _served(request.app[GATEWAY])})


async def retrieve_model(request: web.Request) -> web.Response:
    """`GET /v1/models/{model}`: the model object, as the list shows it, or 404."""
    if (refused := _locked(request)) is not None:
        return refused
    gw: Gateway = request.app[GATEWAY]
    model = request.match_info["model"]
    for obj in _served(gw):
        if obj["id"] == model:
            return web.json_response(obj)
    gw.client_errors.note(Kind.NOT_FOUND, "a model", request.remote)
    return json_error(404, errs.model_not_found(model))


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    gw: Gateway = request.app[GATEWAY]
    if gw.ready:
        return web.Response(text="ready\n")
    return web.Response(status=503, text="not ready\n")


async def grid_status(request: web.Request) -> web.Response:
    if request.app.get(_OPEN) is None and (refused := _locked(request)) is not None:
        return refused
    gw: Gateway = request.app[GATEWAY]
    body = json.dumps(status(gw, gw.history), indent=1)
    return web.Response(body=body.encode(), content_type="application/json")


async def grid_history(request: web.Request) -> web.Response:
    """The last minutes at one-second resolution (`gateway.timeline`); `?since=T` (epoch
    seconds) answers only the points after T, so the page fetches the whole buffer once."""
    gw: Gateway = request.app[GATEWAY]
    raw = request.query.get("since")
    try:
        since = None if raw is None else float(raw)
    except ValueError:
        return web.json_response(
            {"error": {"message": f"since: not a number: {str(raw)[:40]!r}",
                       "type": "invalid_request_error", "code": "invalid_since"}},
            status=400,
        )  # fmt: skip
    return web.json_response(gw.timeline.body(since))


_OPEN = web.AppKey("open", bool)
"""Set on the operator listener: its status pages need no API key."""

DASHBOARD = Path(__file__).parent / "static" / "dashboard.html"
"""The dashboard: one hand-written page (no CDN, works air-gapped) polling /grid/status."""


async def dashboard(request: web.Request) -> web.StreamResponse:
    if request.app.get(_OPEN) is None and (refused := _locked(request)) is not None:
        return refused
    return web.FileResponse(DASHBOARD, headers={"Content-Type": "text/html; charset=utf-8"})


def _wrong_method(allow: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def answer(request: web.Request) -> web.Response:
        request.app[GATEWAY].client_errors.note(Kind.METHOD_NOT_ALLOWED, request.path)
        resp = json_error(405, errs.method_not_allowed(request.method, request.path))
        resp.headers["Allow"] = allow
        return resp

    return answer


async def unknown_path(request: web.Request) -> web.Response:
    request.app[GATEWAY].client_errors.note(Kind.NOT_FOUND, request.path[:100], request.remote)
    return json_error(404, errs.not_found(request.path))


async def _close_while_draining(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer made while the gateway drains says `Connection: close`."""
    if request.app[GATEWAY].draining:
        response.force_close()


def create_app(gw: Gateway) -> web.Application:
    """The API app; starting it starts the gateway's pools, probes and poll loop.

    Serve it with `GuardedRunner(app, guard=gw.guard)` for the listener's bounds."""
    app = web.Application(client_max_size=_NO_LIMIT, handler_args={"max_field_size": 65536})
    app[GATEWAY] = gw
    for path in ROUTED_PATHS:
        app.router.add_post(path, proxy.handle)
        app.router.add_route("*", path, _wrong_method("POST"))
    gets: dict[str, Callable[[web.Request], Awaitable[web.StreamResponse]]] = {
        "/v1/models": list_models,
        "/v1/models/{model:.+}": retrieve_model,
        "/healthz": healthz,
        "/readyz": readyz,
        "/grid/status": grid_status,
        "/grid/history": grid_history,
        "/dashboard": dashboard,
    }
    for path, handler in gets.items():
        app.router.add_get(path, handler)
        app.router.add_route("*", path, _wrong_method("GET, HEAD"))
    app.router.add_route("*", "/{tail:.*}", unknown_path)
    app.on_response_prepare.append(_close_while_draining)

    async def on_startup(_app: web.Application) -> None:
        gw.started_at = time.time()
        await gw.start()

    async def on_cleanup(_app: web.Application) -> None:
        await gw.stop()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app


def create_metrics_app(gw: Gateway) -> web.Application:
    """The opt-in operator listener: `/metrics`, `/grid/status` and `/dashboard`, kept
    off the API port (as the seed's chart does) and never behind the API keys."""

    async def metrics(_request: web.Request) -> web.Response:
        body = generate_latest(gw.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app[GATEWAY] = gw
    app[_OPEN] = True
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/grid/status", grid_status)
    app.router.add_get("/dashboard", dashboard)
    return app
