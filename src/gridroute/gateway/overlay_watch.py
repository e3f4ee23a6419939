"""The gateway's routing overlay: read it, check it, swap it in whole, keep the last good.

A watch task reads the overlay every `overlay.poll_interval_s`, from a file or from a
URL (`gridroute control` serves one, with an ETag, so an unchanged overlay costs a 304).
Each read is offered to `offer`:

    same bytes as the serving overlay                        -> `same` (nothing happens)
    not valid (schema, group rules, a provider with no
    backend here, a model the config does not route)         -> `invalid`, logged; the
                                                                last good one keeps serving
    valid, same semantic digest (e.g. only the revision)     -> `same`
    valid, new digest                                        -> `ok`: a new `OverlayIndex`
                                                                replaces the old by reference
    the file or URL could not be read                        -> `unreachable`

counted in `grid_route_overlay_reloads_total{result}`. A request reads `table()` once
and keeps it to its end (retries included), so a swap never changes a request in
flight. Picker positions (`states`) live here, outside every index, so no reload
resets them. Nothing on the request path reads the file or the URL: `fetches` (and
`grid_route_overlay_fetches_total`) count every read, for tests and demos to prove it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable, Mapping
from pathlib import Path

import aiohttp
from prometheus_client import CollectorRegistry, Counter, Gauge

from gridroute.config import ConfigError
from gridroute.core import Health
from gridroute.core.group_route import OverlayIndex, RouteTable, build_table
from gridroute.core.overlay_request import RoutedDecisions
from gridroute.core.pickers import PickerStates
from gridroute.gateway.config import OverlayConfig
from gridroute.gateway.routing import Routing
from gridroute.wire.overlay import Overlay, digest, parse_overlay, to_index

log = logging.getLogger("gridroute.gateway.overlay")

RESULTS = ("ok", "same", "invalid", "unreachable")


class OverlayMetrics:
    """The overlay's counters; labels are bounded enums and small group numbers only."""

    MAX_GROUP_LABEL = 8
    """Group numbers from this one up share the label `8+`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.reloads = Counter(
            "grid_route_overlay_reloads_total",
            "Overlay reads by result: ok (adopted), same (nothing changed), invalid "
            "(refused; the last good overlay keeps serving), unreachable.",
            ["result"],
            registry=registry,
        )
        self.fetches = Counter(
            "grid_route_overlay_fetches_total",
            "Reads of the overlay file or URL (the only control-plane calls a gateway makes).",
            registry=registry,
        )
        self.revision = Gauge(
            "grid_route_overlay_revision", "Revision of the serving overlay.", registry=registry
        )
        self.picks = Counter(
            "grid_route_overlay_picks_total",
            "Attempts routed by the overlay: picker, group number, and step (first, bound, "
            "in_group, fell_through, none = no viable group).",
            ["picker", "group", "step"],
            registry=registry,
        )
        self.affinity = Counter(
            "grid_route_overlay_affinity_total",
            "Overlay requests with a session key: created, reused or failed_over.",
            ["outcome"],
            registry=registry,
        )
        self._picks: dict[tuple[str, int | None, str], Counter] = {}

    def pick(self, picker: str, group: int | None, step: str) -> None:
        key = (picker, group, step)
        c = self._picks.get(key)
        if c is None:
            if group is None:
                label = ""
            elif group >= self.MAX_GROUP_LABEL:
                label = f"{self.MAX_GROUP_LABEL}+"
            else:
                label = str(group)
            c = self._picks[key] = self.picks.labels(picker, label, step)
        c.inc()


def check_backends(overlay: Overlay, routing: Routing, source: str) -> None:
    """Refuse an overlay that names a provider or model this gateway cannot route."""
    for i, cap in enumerate(overlay.models):
        if cap.model not in routing.policies:
            raise ConfigError.one(
                source,
                f"models.{i}.model",
                f"capability {cap.model!r} is not a model of the gateway config (models)",
            )
        for part in ("candidates", "excluded"):
            for j, c in enumerate(getattr(cap, part)):
                if c.key not in routing.backends:
                    raise ConfigError.one(
                        source,
                        f"models.{i}.{part}.{j}",
                        f"capability {cap.model!r}, group {c.selection_group}: provider "
                        f"{c.key} has no backend in the gateway config (sites)",
                    )


class OverlayWatch:
    """The serving overlay of one gateway worker and the task that keeps it current."""

    def __init__(
        self,
        cfg: OverlayConfig,
        routing: Callable[[], Routing],
        registry: CollectorRegistry,
    ) -> None:
        self.cfg = cfg
        self._routing = routing
        self.metrics = OverlayMetrics(registry)
        self.index: OverlayIndex | None = None
        self.states = PickerStates()
        self.routed = RoutedDecisions()
        """The flow's decisions per provider on the current snapshot (built once each)."""
        self.fetches = 0
        self.results: dict[str, int] = dict.fromkeys(RESULTS, 0)
        self.last_error: str | None = None
        self.accepted_revision: int | None = None
        """Revision of the newest valid overlay read (a same-digest one is not swapped in)."""
        self._raw: str | None = None
        self._bad: str | None = None
        self._etag: str | None = None
        self._cache: tuple[OverlayIndex, Mapping[str, Health], RouteTable] | None = None
        self._session: aiohttp.ClientSession | None = None
        self.loaded = asyncio.Event()

    @property
    def source(self) -> str:
        return self.cfg.file or self.cfg.url or "<overlay>"

    def routes(self, model: str) -> bool:
        idx = self.index
        return idx is not None and model in idx.models

    def table(self, health: Mapping[str, Health]) -> RouteTable | None:
        """The serving overlay joined with the gateway's probe verdicts (cached until
        either changes: `CurrentGrid` replaces its health dict on every change)."""
        idx = self.index
        if idx is None:
            return None
        cached = self._cache
        if cached is not None and cached[0] is idx and cached[1] is health:
            return cached[2]
        down = [k for k, h in health.items() if h is Health.DOWN]
        table = build_table(idx, down)
        self._cache = (idx, health, table)
        return table

    def _count(self, result: str) -> str:
        self.results[result] += 1
        self.metrics.reloads.labels(result).inc()
        return result

    def offer(self, raw: bytes) -> str:
        """Consider one read of the overlay; returns the result counted."""
        h = hashlib.sha256(raw).hexdigest()
        if h == self._raw and self.index is not None:
            return self._count("same")
        if h == self._bad:
            return self._count("invalid")  # refused and logged already
        try:
            overlay = parse_overlay(raw, self.source)
            check_backends(overlay, self._routing(), self.source)
        except ConfigError as exc:
            self._bad = h
            self.last_error = str(exc)
            log.error("overlay refused, the last good one keeps serving:\n%s", exc)
            return self._count("invalid")
        self._bad = None
        self._raw = h
        self.last_error = None
        self.accepted_revision = overlay.revision
        d = digest(overlay)
        if self.index is not None and self.index.digest == d:
            return self._count("same")
        self.index = to_index(overlay, d)
        self.metrics.revision.set(overlay.revision)
        self.loaded.set()
        log.warning("overlay revision %d adopted (digest %s)", overlay.revision, d[:12])
        return self._count("ok")

    def forget_source(self) -> None:
        """Re-check the next read even when its bytes are unchanged (after a config
        reload changed the backends it is checked against)."""
        self._raw = None
        self._bad = None
        self._etag = None

    async def read_once(self) -> str:
        self.fetches += 1
        self.metrics.fetches.inc()
        try:
            if self.cfg.file is not None:
                raw = await asyncio.to_thread(Path(self.cfg.file).read_bytes)
                return self.offer(raw)
            got = await self._get()
        except (OSError, aiohttp.ClientError, TimeoutError) as exc:
            self.last_error = f"cannot read {self.source}: {exc}"
            log.error("overlay: %s", self.last_error)
            return self._count("unreachable")
        if got is None:
            return self._count("same")
        body, etag = got
        result = self.offer(body)
        self._etag = etag if result in ("ok", "same") else None
        return result

    async def _get(self) -> tuple[bytes, str | None] | None:
        """GET the URL: (body, ETag), or None when it answers 304 to our ETag."""
        assert self.cfg.url is not None
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self.cfg.timeout_s)
            )
        headers = {"If-None-Match": self._etag} if self._etag and self.index else {}
        async with self._session.get(self.cfg.url, headers=headers) as resp:
            if resp.status == 304:
                return None
            if resp.status != 200:
                raise aiohttp.ClientError(f"status {resp.status}")
            return await resp.read(), resp.headers.get("ETag")

    async def run(self) -> None:
        while True:
            await self.read_once()
            await asyncio.sleep(self.cfg.poll_interval_s)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
