"""The operator's HTTP surface: `/signals`, `/metrics`, `/status`, `/healthz`.

`GET /signals` serves every row this operator knows (own providers, peers' accepted
rows, each peer's last poll-round end) with a `Date` header from the operator's
clock. Query parameters: `scope=own` (what peers ask for: only this site's rows),
`latest=1` (one sample per provider: a strictly valid Prometheus exposition),
`since=CURSOR` with `scope=own` (only rows appended after the cursor that the
`X-Grid-Cursor` header of an earlier answer named: a delta poll). A gateway's poll
carries its own in-flight (`wire.gateway_report` headers); every body relays the
gateway sums it knows beside the rows (a delta poll: this site's).
"""

from __future__ import annotations

import email.utils
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gridroute.operator.capacity import register as register_capacity
from gridroute.wire.gateway_report import (
    DEMAND_HEADER,
    GATEWAY_HEADER,
    IN_FLIGHT_HEADER,
    UNMET_HEADER,
    WANT_HEADER,
    parse_demand,
    parse_in_flight,
    valid_gateway_id,
)
from gridroute.wire.signals import CONTENT_TYPE, CURSOR_HEADER, TIME_HEADER

if TYPE_CHECKING:
    from gridroute.operator.service import Operator

OPERATOR_KEY: web.AppKey[Operator] = web.AppKey("operator")


async def signals(request: web.Request) -> web.Response:
    op = request.app[OPERATOR_KEY]
    now = op.clock()
    own_only = request.query.get("scope") == "own"
    latest_only = request.query.get("latest") in ("1", "true")
    gateway = request.headers.get(GATEWAY_HEADER)
    report = request.headers.get(IN_FLIGHT_HEADER)
    if report is not None and valid_gateway_id(gateway):
        counts = parse_in_flight(report)
        if counts is not None:
            assert gateway is not None
            h = request.headers
            demand = parse_demand(h.get(DEMAND_HEADER), h.get(UNMET_HEADER), h.get(WANT_HEADER))
            op.gateway_reports.record(gateway, counts, now, demand)
    gateways = op.gateway_reports.rows(now, own_only=own_only)
    after = op.store.rows_after(request.query.get("since")) if own_only else None
    if after is not None:
        encoded = op.store.encode_since(now, after, gateways=gateways)
    else:
        encoded = op.store.encode(
            now, own_only=own_only, latest_only=latest_only, gateways=gateways
        )
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
