"""The operator's HTTP surface: `/signals`, `/metrics`, `/status`, `/healthz`.

`GET /signals` serves every row this operator knows (own providers, peers' accepted
rows, each peer's last poll-round end) with a `Date` header from the operator's
clock. Query parameters: `scope=own` (what peers ask for: only this site's rows),
<<<<<<< HEAD
`latest=1` (one sample per provider: a strictly valid Prometheus exposition),
`since=CURSOR` with `scope=own` (only rows appended after the cursor that the
`X-Grid-Cursor` header of an earlier answer named: a delta poll).
=======
`latest=1` (one sample per provider: a strictly valid Prometheus exposition).
A gateway's poll carries its own in-flight (`wire.gateway_report` headers); the body
relays every site's gateway sums beside the rows.
>>>>>>> eb2f590 (gateway reports its own in-flight on each operator poll (x-grid-gateway, x-grid-in-flight); operators relay per-site gateway sums in /signals (grid_gateways_reporting, grid_gateway_in_flight); a gateway alone for a window takes all non-own load as external at once; fake server: /admin/external and /admin/metrics; e2e: external load and failing metrics on real processes)
"""

from __future__ import annotations

import email.utils
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

<<<<<<< HEAD
from gridroute.operator.capacity import register as register_capacity
from gridroute.wire.signals import CONTENT_TYPE, CURSOR_HEADER, TIME_HEADER
=======
from gridroute.wire.gateway_report import (
    GATEWAY_HEADER,
    IN_FLIGHT_HEADER,
    parse_in_flight,
    valid_gateway_id,
)
from gridroute.wire.signals import CONTENT_TYPE, TIME_HEADER
>>>>>>> eb2f590 (gateway reports its own in-flight on each operator poll (x-grid-gateway, x-grid-in-flight); operators relay per-site gateway sums in /signals (grid_gateways_reporting, grid_gateway_in_flight); a gateway alone for a window takes all non-own load as external at once; fake server: /admin/external and /admin/metrics; e2e: external load and failing metrics on real processes)

if TYPE_CHECKING:
    from gridroute.operator.service import Operator

OPERATOR_KEY: web.AppKey[Operator] = web.AppKey("operator")


async def signals(request: web.Request) -> web.Response:
    op = request.app[OPERATOR_KEY]
    now = op.clock()
    own_only = request.query.get("scope") == "own"
    latest_only = request.query.get("latest") in ("1", "true")
<<<<<<< HEAD
    after = op.store.rows_after(request.query.get("since")) if own_only else None
    if after is not None:
        encoded = op.store.encode_since(now, after)
    else:
        encoded = op.store.encode(now, own_only=own_only, latest_only=latest_only)
=======
    gateway = request.headers.get(GATEWAY_HEADER)
    report = request.headers.get(IN_FLIGHT_HEADER)
    if report is not None and valid_gateway_id(gateway):
        counts = parse_in_flight(report)
        if counts is not None:
            assert gateway is not None
            op.gateway_reports.record(gateway, counts, now)
    gateways = op.gateway_reports.rows(now, own_only=own_only)
    encoded = op.store.encode(now, own_only=own_only, latest_only=latest_only, gateways=gateways)
>>>>>>> eb2f590 (gateway reports its own in-flight on each operator poll (x-grid-gateway, x-grid-in-flight); operators relay per-site gateway sums in /signals (grid_gateways_reporting, grid_gateway_in_flight); a gateway alone for a window takes all non-own load as external at once; fake server: /admin/external and /admin/metrics; e2e: external load and failing metrics on real processes)
    headers = {
        "Date": email.utils.formatdate(now, usegmt=True),
        TIME_HEADER: f"{now:.3f}",
        CURSOR_HEADER: op.store.cursor(),
        "Content-Type": CONTENT_TYPE,
    }
    return web.Response(body=encoded.body, headers=headers)


async def metrics(request: web.Request) -> web.Response:
    op = request.app[OPERATOR_KEY]
    body = generate_latest(op.metrics.registry)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def status(request: web.Request) -> web.Response:
    return web.json_response(request.app[OPERATOR_KEY].status())


async def healthz(_: web.Request) -> web.Response:
    return web.Response(text="ok\n")


def build_app(op: Operator) -> web.Application:
    app = web.Application()
    app[OPERATOR_KEY] = op
    app.router.add_get("/signals", signals)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/status", status)
    app.router.add_get("/healthz", healthz)
    register_capacity(app)
    return app
