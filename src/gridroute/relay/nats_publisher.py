"""The operator's side of the NATS transport: publish this site's own newest rows.

An operator on NATS does not poll its peers: it publishes what it scraped, once per
scrape, on `<prefix>.<site>` (the relay format, `latest` rows only: one sample per
provider, so no byte is sent twice), with its clock in `X-Grid-Time` for readers to
re-base the stamps as on the mesh. A publish while the connection is down is counted
and skipped (the next scrape publishes newer rows); the client reconnects on its own.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter

from gridroute.relay.nats_link import NatsLink, connect_options
from gridroute.wire.signals import TIME_HEADER

log = logging.getLogger(__name__)


class PublishMetrics:
    """`grid_signals_published_total{result}` and the bytes published."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.published = Counter(
            "grid_signals_published_total",
            "Publishes of this site's rows to the signals transport, by result.",
            ["result"],
            registry=registry,
        )
        self.bytes = Counter(
            "grid_signals_published_bytes_total",
            "Bytes of rows published to the signals transport.",
            registry=registry,
        )
        for result in ("ok", "disconnected", "error"):
            self.published.labels(result)


class NatsPublisher:
    """Publishes `body()` (this site's newest rows) on the site's subject."""

    def __init__(
        self,
        link: NatsLink,
        site: str,
        *,
        metrics: PublishMetrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.link = link
        self.site = site
        self.subject = link.subject(site)
        self._metrics = metrics
        self._clock = clock
        self._nc: Any = None
        self.refusals: list[str] = []
        """Errors the server sent back (a permissions violation lands here)."""

    async def _connect(self) -> Any:
        if self._nc is not None and not self._nc.is_closed:
            return self._nc
        import nats  # the optional transport: imported only when it is configured

        self._nc = await nats.connect(
            **connect_options(self.link, f"gridroute-operator-{self.site}"),
            error_cb=self._on_error,
        )
        return self._nc

    async def _on_error(self, exc: Exception) -> None:
        text = str(exc)
        self.refusals = [*self.refusals[-15:], text]
        log.warning("nats: %s", text)

    async def publish(self, body: bytes) -> bool:
        """Publish one body; True when it left for the server (never raises)."""
        try:
            nc = await self._connect()
            if not nc.is_connected:
                self._metrics.published.labels("disconnected").inc()
                return False
            headers = {TIME_HEADER: f"{self._clock():.3f}"}
            await nc.publish(self.subject, body, headers=headers)
        except Exception as exc:  # no server yet, or a broken connection
            self._metrics.published.labels("error").inc()
            log.debug("nats publish failed: %s", exc)
            return False
        self._metrics.published.labels("ok").inc()
        self._metrics.bytes.inc(len(body))
        return True

    async def flush(self) -> None:
        if self._nc is not None and self._nc.is_connected:
            await self._nc.flush(timeout=self.link.flush_timeout_s)

    async def close(self) -> None:
        if self._nc is not None:
            try:
                await self._nc.close()
            finally:
                self._nc = None
