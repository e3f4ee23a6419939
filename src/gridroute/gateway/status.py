"""`GET /grid/status`: the gateway's view of the grid as JSON, for dashboards and people.

Per site: readiness, liveness (silence), health, rho reported, counted and ranked by
(the same figures as the `grid_route_site_rho*` gauges, from `CurrentGrid.readings`), learned
ceilings, capacity, draw weight, this gateway's in-flight and its share of the polled
in-flight (the fair-share rule's); which worker answered; per model: shedding and
the refusal class; decisions by path and by site and reason, in total and over the
last `RECENT_S` seconds; the health of the operator poll. Built on request from the
current snapshot; the only state kept for it is one totals sample per second.
"""

from __future__ import annotations

import math
import os
from collections import deque
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gridroute.gateway.runtime import Gateway

RECENT_S = 60.0


def _num(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(value, 4)


class DecisionHistory:
    """Totals of decisions sampled once per second, to answer "how many lately"."""

    def __init__(self, keep_s: float = RECENT_S) -> None:
        self.keep_s = keep_s
        self._points: deque[tuple[float, dict[str, float], dict[str, dict[str, float]]]] = deque()

    def record(self, gw: Gateway, now: float) -> None:
        self._points.append((now, gw.metrics.selections(), gw.metrics.decisions()))
        while self._points and now - self._points[0][0] > self.keep_s:
            self._points.popleft()

    def recent(
        self, selections: dict[str, float], decisions: dict[str, dict[str, float]]
    ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        if not self._points:
            return selections, decisions
        _, sel0, dec0 = self._points[0]
        sel = {k: v - sel0.get(k, 0.0) for k, v in selections.items()}
        dec = {
            site: {r: v - dec0.get(site, {}).get(r, 0.0) for r, v in reasons.items()}
            for site, reasons in decisions.items()
        }
        return sel, dec


def status(gw: Gateway, history: DecisionHistory) -> dict[str, Any]:
    current = gw.current
    snap = current.snapshot
    sites = []
    for r in current.readings():
        v = r.view
        sites.append(
            {
                "site": v.site,
                "backend": v.provider,
                "local": v.candidate.local,
                "models": sorted(v.candidate.models),
                "ready": v.ready,
                "measured": v.measured,
                "live": None if v.live is None else v.live.value,
                "silent_s": None if v.sampled_at is None else _num(snap.at - v.sampled_at),
                "health": v.health.value,
                "rho_reported": _num(r.rho_reported),
                "rho_counted": _num(r.rho_counted),
                "rho": _num(r.rho),
                "share": _num(v.share) if v.measured else None,
                "budget": _num(v.budget) if v.measured else None,
                "budget_granted": _num(v.budget_up) if v.measured else None,
                "demand_target": None if v.target is None else _num(v.target),
                "ceiling_soft": _num(v.soft),
                "ceiling_hard": _num(v.hard),
                "ceiling": _num(v.ceiling) if v.measured else None,
                "capacity": _num(v.capacity),
                "weight": _num(r.weight),
                "queued": _num(v.queued),
                "full": v.full,
                "in_flight": r.own,
            }
        )
    selections = gw.metrics.selections()
    decisions = gw.metrics.decisions()
    recent_sel, recent_dec = history.recent(selections, decisions)
    classes = gw.refusals.current()
    models = {
        m: {
            "policy": p.value,
            "shedding": m in snap.shedding or classes.get(m) == "shed",
            "state": classes.get(m, "routed"),
        }
        for m, p in current.routing.policies.items()
    }
    poll: dict[str, Any] = {"configured": gw.signals is not None}
    if gw.signals is not None:
        latest = gw.signals.latest
        poll.update(
            {
                "completed": gw.signals.completed,
                "result": None if latest is None else latest.result.value,
                "error": None if latest is None else latest.error,
                "age_s": None if latest is None else _num(current.clock() - latest.ended_at),
                "undelivered": sorted(gw.signals.undelivered),
            }
        )
    return {
        "at": snap.at,
        "snapshot_age_s": _num(current.clock() - snap.at),
        "external_in_flight": _num(current.state.external),
        "gateways_reporting": current.state.gateways_reporting,
        "ready": gw.ready,
        "draining": gw.draining,
        "worker": {"index": gw.worker, "pid": os.getpid()},
        "sites": sites,
        "models": models,
        "selections": {"total": selections, "recent": recent_sel},
        "decisions": {"total": decisions, "recent": recent_dec},
        "poll": poll,
        "health_rounds": gw.prober.rounds,
        "reloads": dict(gw.reloads, last_error=gw.last_reload_error),
        "overlay": overlay_status(gw),
    }


def overlay_status(gw: Gateway) -> dict[str, Any] | None:
    """The serving overlay: revision, digest, reads and their results (None: no overlay)."""
    watch = gw.overlay
    if watch is None:
        return None
    idx = watch.index
    return {
        "source": watch.source,
        "revision": None if idx is None else idx.revision,
        "accepted_revision": watch.accepted_revision,
        "digest": None if idx is None else idx.digest,
        "fetches": watch.fetches,
        "results": dict(watch.results),
        "last_error": watch.last_error,
        "models": sorted(idx.models) if idx is not None else [],
    }
