"""Once a second, what the grid looks like: the gateway's view plus the sites' own counts.

The live terminal view, the demo's plot and its summary all read the same `Tick`s, so
what the view showed and what the plot draws cannot disagree. A tick joins two
sources: the gateway's `/grid/status` (liveness, rho, in-flight, refusals, shedding:
what the router believed) and each fake server's `/admin/stats` (requests it really
completed: the ground truth the shares are computed from). A source that does not
answer in time leaves its fields empty for that tick instead of stalling the sampler.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

ROUTED_REASONS = frozenset({"routed", "fallback", "last_resort"})
"""Decision reasons that sent a request somewhere; every other reason is a refusal."""


@dataclass(frozen=True, slots=True)
class SiteTick:
    """One site at one tick."""

    site: str
    live: str | None = None
    """live, silent or returning in the gateway's view (None: not seen)."""
    ready: bool = False
    health: str | None = None
    rho_reported: float | None = None
    rho_counted: float | None = None
    in_flight: int = 0
    capacity: float | None = None
    ceiling: float | None = None
    weight: float | None = None
    served: int | None = None
    """Requests the site's model server completed since it started."""
    refused: Mapping[str, float] = field(default_factory=dict)
    """Decisions over the gateway's recent window that passed this site over, by reason."""
    routed: float = 0.0
    """Requests the gateway has sent here so far (routed, fallback, last resort)."""
    load: float | None = None
    """(running + waiting) / slots at the site's model server: the simulator's rho."""
    overshoot: int | None = None
    """Requests that arrived at the site's model server with every slot busy, so far."""
    failed_requests: int | None = None
    """Model requests the site's model server answered with an injected failure (a
    partitioned or failed site), so far: the requests sent to it while it was dead."""

    @property
    def state(self) -> str:
        """What routing makes of the site: live, silent, returning (operators' view), or
        demoted (its health probes fail), or `?` before the gateway has seen it."""
        if self.live is None:
            return "?"
        if self.live == "live" and self.health == "down":
            return "demoted"
        return self.live


@dataclass(frozen=True, slots=True)
class Tick:
    """The whole grid at `t` seconds after sampling began."""

    t: float
    sites: Mapping[str, SiteTick]
    shedding: bool = False
    """Some model is being shed (answered 429) by the gateway."""
    shed_total: float = 0.0
    """Requests the gateway has refused with 429 so far (its `shed` selections)."""
    error: str | None = None
    """Why the gateway's status could not be read this tick, if it could not."""


def site_ticks(
    status: Mapping[str, Any] | None,
    served: Mapping[str, int],
    stats: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, SiteTick]:
    """Join one `/grid/status` answer with the sites' completion counts and, when given,
    their whole `/admin/stats` (pure)."""
    extra = {name: _server_fields(st) for name, st in (stats or {}).items()}
    out: dict[str, SiteTick] = {}
    decisions = {} if status is None else status.get("decisions", {})
    recent, total = decisions.get("recent", {}), decisions.get("total", {})
    for row in [] if status is None else status.get("sites", []):
        name = row["site"]
        reasons = recent.get(name, {})
        out[name] = SiteTick(
            site=name,
            live=row.get("live"),
            ready=bool(row.get("ready")),
            health=row.get("health"),
            rho_reported=row.get("rho_reported"),
            rho_counted=row.get("rho_counted"),
            in_flight=int(row.get("in_flight") or 0),
            capacity=row.get("capacity"),
            ceiling=row.get("ceiling"),
            weight=row.get("weight"),
            served=served.get(name),
            refused={r: n for r, n in reasons.items() if r not in ROUTED_REASONS and n > 0},
            routed=sum(n for r, n in total.get(name, {}).items() if r in ROUTED_REASONS),
            **extra.get(name, {}),
        )
    for name, count in served.items():
        if name not in out:
            out[name] = SiteTick(site=name, served=count, **extra.get(name, {}))
    return out


def _server_fields(stats: Mapping[str, Any]) -> dict[str, Any]:
    slots = stats.get("slots") or 0
    busy = (stats.get("running") or 0) + (stats.get("waiting") or 0)
    return {
        "load": busy / slots if slots else None,
        "overshoot": stats.get("overshoot"),
        "failed_requests": stats.get("failed_requests"),
    }


def tick_of(t: float, status: Mapping[str, Any] | None, served: Mapping[str, int],
            error: str | None = None,
            stats: Mapping[str, Mapping[str, Any]] | None = None) -> Tick:  # fmt: skip
    """Build one `Tick` from the raw answers (pure, so tests feed it recorded JSON)."""
    models = {} if status is None else status.get("models", {})
    shed_total = 0.0 if status is None else status.get("selections", {}).get("total", {})
    shed_total = float(shed_total.get("shed", 0.0)) if isinstance(shed_total, dict) else 0.0
    return Tick(
        t=t,
        sites=site_ticks(status, served, stats),
        shedding=any(m.get("shedding") for m in models.values()),
        shed_total=shed_total,
        error=error,
    )


def recent_shares(ticks: Sequence[Tick], window_s: float = 3.0) -> dict[str, float]:
    """Each site's share of completions over the last `window_s` seconds of ticks."""
    if len(ticks) < 2:
        return {}
    last = ticks[-1]
    first = next((tk for tk in ticks if tk.t >= last.t - window_s - 1e-9), ticks[0])
    if first is last:
        first = ticks[-2]
    deltas: dict[str, int] = {}
    for name, st in last.sites.items():
        before = first.sites.get(name)
        if st.served is not None and before is not None and before.served is not None:
            deltas[name] = max(0, st.served - before.served)
    total = sum(deltas.values())
    return {k: v / total for k, v in deltas.items()} if total else dict.fromkeys(deltas, 0.0)


def recent_rate(ticks: Sequence[Tick], window_s: float = 3.0) -> float:
    """Completions per second over the last `window_s` seconds, all sites together."""
    if len(ticks) < 2:
        return 0.0
    last = ticks[-1]
    first = next((tk for tk in ticks if tk.t >= last.t - window_s - 1e-9), ticks[0])
    if first is last:
        first = ticks[-2]
    span = last.t - first.t

    def total(tk: Tick) -> int:
        return sum(s.served or 0 for s in tk.sites.values())

    return (total(last) - total(first)) / span if span > 0 else 0.0


class Sampler:
    """Polls a gateway and the fake sites every `interval_s`, keeping every `Tick`."""

    def __init__(
        self, gateway_url: str, backends: Mapping[str, str], interval_s: float = 1.0
    ) -> None:
        self.gateway_url = gateway_url
        self.backends = dict(backends)
        self.interval_s = interval_s
        self.ticks: list[Tick] = []
        self.started = time.monotonic()
        self._task: asyncio.Task[None] | None = None

    async def _get(self, session: aiohttp.ClientSession, url: str) -> Any:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=0.9)) as resp:
            resp.raise_for_status()
            return await resp.json(content_type=None)

    async def sample(self, session: aiohttp.ClientSession) -> Tick:
        """Read every source once, concurrently, and record the tick."""
        names = list(self.backends)
        answers = await asyncio.gather(
            self._get(session, f"{self.gateway_url}/grid/status"),
            *(self._get(session, f"{self.backends[n]}/admin/stats") for n in names),
            return_exceptions=True,
        )
        status, stats = answers[0], answers[1:]
        error = None
        if isinstance(status, BaseException):
            error = f"{type(status).__name__}: {status}".strip(": ")
            status = None
        good = {n: s for n, s in zip(names, stats, strict=True) if isinstance(s, dict)}
        served = {n: int(s["served"]) for n, s in good.items()}
        tick = tick_of(time.monotonic() - self.started, status, served, error, good)
        self.ticks.append(tick)
        return tick

    async def run(self) -> None:
        """Sample until cancelled."""
        async with aiohttp.ClientSession() as session:
            while True:
                began = time.monotonic()
                with contextlib.suppress(Exception):
                    await self.sample(session)
                await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - began)))

    def start(self) -> None:
        self.started = time.monotonic()
        self._task = asyncio.create_task(self.run(), name="sampler")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
