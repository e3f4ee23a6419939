"""`GET /capacity/{provider}`: this site's capacity report for one provider, in the shape
the TrafficMap control plane polls (reference 4.4): `{"servable": N, "observedAt": T}`.

`servable` is the number of ready endpoints in the provider's newest own sample (what
the site measured, not what the control plane allocated), `observedAt` that sample's
time in RFC 3339. A provider this operator does not have is 404; one with no sample yet
is 503, so the control plane falls back to its own allocation instead of reading 0.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import TYPE_CHECKING

from aiohttp import web

from gridroute.wire.openai_errors import CONTENT_TYPE, error_body

if TYPE_CHECKING:
    from gridroute.operator.service import Operator


def report(op: Operator, provider: str) -> tuple[int, dict[str, object] | bytes]:
    """(status, body) of the report for `provider`."""
    names = {p.name for p in op.config.providers}
    if provider not in names:
        return 404, error_body(f"no provider {provider!r} at this site", "not_found", "unknown")
    sample = op.store.latest().get(f"{op.config.site}/{provider}")
    ready = None if sample is None else sample.ready
    if sample is None or ready is None or not math.isfinite(ready):
        return 503, error_body(f"no sample of {provider!r} yet", "server_error", "no_sample")
    observed = dt.datetime.fromtimestamp(sample.at, tz=dt.UTC)
    stamp = observed.isoformat(timespec="seconds").replace("+00:00", "Z")
    return 200, {"servable": max(int(ready), 0), "observedAt": stamp}


async def capacity(request: web.Request) -> web.Response:
    from gridroute.operator.server import OPERATOR_KEY

    status, body = report(request.app[OPERATOR_KEY], request.match_info["provider"])
    if isinstance(body, bytes):
        return web.Response(status=status, body=body, content_type=CONTENT_TYPE)
    return web.json_response(body, status=status)


def register(app: web.Application) -> None:
    app.router.add_get("/capacity/{provider}", capacity)
