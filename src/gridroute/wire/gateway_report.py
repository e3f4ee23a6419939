"""What a gateway tells its operator on each poll: its own in-flight per candidate.

Carried as two request headers of the `/signals` poll the gateway already makes (mutual
TLS when configured), so reporting adds no call and nothing to the request path::

    x-grid-gateway: gw-7f3a
    x-grid-in-flight: hub/pool-a=12,west/pool-a=3
    x-grid-demand: hub/pool-a=9,west/pool-a=18
    x-grid-unmet: hub/pool-a=6,west/pool-a=6
    x-grid-want: west/pool-a=4

The last three (`core/demand.py`, sent only with `follow_demand`) have the in-flight
header's form: per candidate, the gateway's demand for what that candidate serves
beyond what it holds there, its unmet demand, and what it wants of the free room there
(its shortfall against its demand target, at most its unmet demand). An operator that knows them not
ignores them; a gateway that sends them not is read as demanding what it holds.

Bounded both ways: at most `MAX_ENTRIES` candidates (the largest counts, when a gateway
has more), counts are integers up to `sample.MAX_COUNT`, names match `NAME_PATTERN`.
A header that does not parse whole is ignored (the report is lost, never half-read).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gridroute.core.demand import DemandReport
from gridroute.core.sample import MAX_COUNT
from gridroute.wire.signals import NAME_PATTERN

GATEWAY_HEADER = "x-grid-gateway"
"""The reporting gateway's id: one per gateway worker, steady for its life."""
IN_FLIGHT_HEADER = "x-grid-in-flight"
DEMAND_HEADER = "x-grid-demand"
UNMET_HEADER = "x-grid-unmet"
WANT_HEADER = "x-grid-want"
MAX_ENTRIES = 64
"""Candidates per report (the same bound as providers per site in a relay)."""
MAX_HEADER_BYTES = 8192

_ID = re.compile(NAME_PATTERN)
_ENTRY = re.compile(f"({NAME_PATTERN})/({NAME_PATTERN})=([0-9]{{1,7}})")


def render_in_flight(counts: Mapping[str, int]) -> str:
    """`site/provider=N,...` for the nonzero counts, largest first, at most MAX_ENTRIES."""
    items = sorted(((k, v) for k, v in counts.items() if v > 0), key=lambda kv: (-kv[1], kv[0]))
    return ",".join(f"{k}={v}" for k, v in items[:MAX_ENTRIES])


def parse_in_flight(text: str) -> dict[str, int] | None:
    """The counts of a header value, or None when any part of it is malformed."""
    if len(text) > MAX_HEADER_BYTES:
        return None
    out: dict[str, int] = {}
    if not text.strip():
        return out
    for part in text.split(","):
        m = _ENTRY.fullmatch(part.strip())
        if m is None or len(out) >= MAX_ENTRIES:
            return None
        value = int(m[3])
        if value > MAX_COUNT:
            return None
        out[f"{m[1]}/{m[2]}"] = value
    return out


def valid_gateway_id(value: str | None) -> bool:
    return value is not None and _ID.fullmatch(value) is not None


def render_demand(report: DemandReport) -> dict[str, str]:
    """The demand headers of a report (none when it has no demand)."""
    out = {}
    if report.beyond:
        out[DEMAND_HEADER] = render_in_flight(report.beyond)
    if report.unmet:
        out[UNMET_HEADER] = render_in_flight(report.unmet)
    if report.want:
        out[WANT_HEADER] = render_in_flight(report.want)
    return out


def parse_demand(
    beyond: str | None, unmet: str | None, want: str | None = None
) -> DemandReport | None:
    """The demand of a report's headers: None when neither is there (an older gateway,
    or one that does not follow demand) or either is malformed (the demand is lost,
    never half-read; the in-flight still counts)."""
    if beyond is None and unmet is None:
        return None
    b = parse_in_flight(beyond or "")
    u = parse_in_flight(unmet or "")
    w = parse_in_flight(want or "")
    if b is None or u is None or w is None:
        return None
    return DemandReport(b, u, w)
