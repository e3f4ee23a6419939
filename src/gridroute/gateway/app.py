"""The gateway's HTTP surface: the OpenAI API, probes, status, and the metrics listener.

POST /v1/chat/completions, /v1/completions, /v1/embeddings, /v1/responses -> proxy
GET  /v1/models   the configured models some ready candidate serves (OpenAI list)
GET  /healthz     liveness: the process answers
GET  /readyz      200 once the first operator poll and first probe round completed
GET  /grid/status the grid as this gateway sees it (JSON)
GET  /grid/history the last minutes of it at one-second resolution (JSON)
GET  /metrics     on the separate `metrics.listen` app only
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gridroute.gateway import proxy
from gridroute.gateway.runtime import GATEWAY, Gateway
from gridroute.gateway.status import status

ROUTED_PATHS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses")
_NO_LIMIT = 1 << 62
"""aiohttp's own body limit is off: `proxy.read_model` enforces the configured one with
an OpenAI-shaped 413, and it follows reloads."""


async def list_models(request: web.Request) -> web.Response:
    gw: Gateway = request.app[GATEWAY]
    snap = gw.current.snapshot
    created = int(gw.started_at)
    data = []
    for model in gw.current.routing.policies:
        plan = snap.plan(model)
        if plan is not None and plan.front is not None:
            data.append(
                {"id": model, "object": "model", "created": created, "owned_by": "gridroute"}
            )
    return web.json_response({"object": "list", "data": data})


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    gw: Gateway = request.app[GATEWAY]
    if gw.ready:
        return web.Response(text="ready\n")
    return web.Response(status=503, text="not ready\n")


async def grid_status(request: web.Request) -> web.Response:
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


DASHBOARD = Path(__file__).parent / "static" / "dashboard.html"
"""The dashboard: one hand-written page (no CDN, works air-gapped) polling /grid/status."""


async def dashboard(_: web.Request) -> web.StreamResponse:
    return web.FileResponse(DASHBOARD, headers={"Content-Type": "text/html; charset=utf-8"})


def create_app(gw: Gateway) -> web.Application:
    """The API app; starting it starts the gateway's pools, probes and poll loop."""
    app = web.Application(client_max_size=_NO_LIMIT, handler_args={"max_field_size": 65536})
    app[GATEWAY] = gw
    for path in ROUTED_PATHS:
        app.router.add_post(path, proxy.handle)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/grid/status", grid_status)
    app.router.add_get("/grid/history", grid_history)
    app.router.add_get("/dashboard", dashboard)

    async def on_startup(_app: web.Application) -> None:
        gw.started_at = time.time()
        await gw.start()

    async def on_cleanup(_app: web.Application) -> None:
        await gw.stop()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app


def create_metrics_app(gw: Gateway) -> web.Application:
    """The opt-in `/metrics` listener (kept off the API port, as the seed's chart does)."""

    async def metrics(_request: web.Request) -> web.Response:
        body = generate_latest(gw.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app
