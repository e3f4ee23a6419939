"""`GET /grid/history`: the last minutes of this gateway's view at one-second resolution.

The dashboard used to keep its history in the open page, so a page opened during an
incident showed four seconds of it. This ring buffer keeps `keep_s` seconds of points
server-side (bounded: `keep_s / resolution_s` points, each over the configured sites and
the status codes answered), recorded by the gateway's one-second history task, so a page
opens with the last minutes drawn. Each point holds, for the second before it:

* per site: its liveness word, rho (reported, counted), share of routed decisions and own
  in-flight; rho is null while the site is silent or unsampled, so a stale reading is a
  gap on the chart, never a live flat line;
* requests answered per second, refusals by exact status (429, 503, ...), and latency
  p50/p99 estimated from the duration histogram's buckets (null with no requests).

Counters are read as deltas of the same totals `/metrics` exposes, so the page and
Prometheus agree; nothing here runs on the request path.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gridroute.gateway.runtime import Gateway

KEEP_S = 600.0
"""Ten minutes: long enough to see an incident's start when the page opens."""
RESOLUTION_S = 1.0
ROUTED = frozenset({"routed", "fallback", "last_resort"})
_GAP_WORDS = frozenset({"silent"})
"""Liveness words whose rho is not a reading of now (drawn as a gap)."""


def _num(value: float | None, digits: int = 4) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, digits)


def quantile(q: float, bounds: Sequence[float], counts: Sequence[float]) -> float | None:
    """`histogram_quantile` over cumulative `counts` at upper `bounds` (last is +Inf):
    linear within the bucket, the last finite bound when it falls in +Inf."""
    total = counts[-1] if counts else 0.0
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound, cum in zip(bounds, counts, strict=True):
        if cum >= rank:
            if math.isinf(bound):
                return lower
            inside = cum - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, cum
    return lower


@dataclass(frozen=True, slots=True)
class Totals:
    """Cumulative counters at one instant, the base of the next point's deltas."""

    at: float
    routed: Mapping[str, float]
    answered: Mapping[int, int]
    bounds: tuple[float, ...]
    buckets: tuple[float, ...]


class Timeline:
    """A ring buffer of points, one per `record` call (the caller paces it)."""

    def __init__(self, keep_s: float = KEEP_S, resolution_s: float = RESOLUTION_S) -> None:
        self.keep_s = keep_s
        self.resolution_s = resolution_s
        self.points: deque[dict[str, Any]] = deque(maxlen=max(1, int(keep_s / resolution_s)))
        self._last: Totals | None = None

    def _totals(self, gw: Gateway, at: float) -> Totals:
        routed = {
            site: sum(n for r, n in reasons.items() if r in ROUTED)
            for site, reasons in gw.metrics.decisions().items()
        }
        bounds, buckets = gw.metrics.duration_buckets()
        return Totals(at, routed, dict(gw.metrics.answered), bounds, buckets)

    def record(self, gw: Gateway, at: float) -> None:
        """Append the point for the time since the previous call (the first call only
        sets the base)."""
        now = self._totals(gw, at)
        before, self._last = self._last, now
        if before is None:
            return
        span = max(1e-9, now.at - before.at)
        routed = {s: max(0.0, n - before.routed.get(s, 0.0)) for s, n in now.routed.items()}
        routed_sum = sum(routed.values())
        sites: dict[str, dict[str, Any]] = {}
        for r in gw.current.readings():
            v = r.view
            word = None if v.live is None else v.live.value
            gap = word is None or word in _GAP_WORDS
            sites[v.site] = {
                "live": word,
                "rho": None if gap else _num(r.rho_reported),
                "rho_counted": None if gap else _num(r.rho_counted),
                "share": _num(routed.get(v.site, 0.0) / routed_sum) if routed_sum else None,
                "in_flight": r.own,
            }
        answered = {code: n - before.answered.get(code, 0) for code, n in now.answered.items()}
        delta = [a - b for a, b in zip(now.buckets, before.buckets, strict=False)]
        if len(delta) != len(now.bounds):
            delta = list(now.buckets)
        self.points.append(
            {
                "t": round(at, 3),
                "sites": sites,
                "requests_per_s": _num(sum(answered.values()) / span, 3),
                "refusals_per_s": {
                    str(code): _num(n / span, 3)
                    for code, n in sorted(answered.items())
                    if code >= 400
                },
                "p50_s": _num(quantile(0.5, now.bounds, delta)),
                "p99_s": _num(quantile(0.99, now.bounds, delta)),
            }
        )

    def since(self, t: float | None) -> list[dict[str, Any]]:
        """Points after `t` (all of them when None)."""
        if t is None:
            return list(self.points)
        return [p for p in self.points if p["t"] > t]

    def body(self, t: float | None = None) -> dict[str, Any]:
        return {
            "resolution_s": self.resolution_s,
            "keep_s": self.keep_s,
            "points": self.since(t),
        }
