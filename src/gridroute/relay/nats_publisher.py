"""The operator's side of the NATS transport: publish this site's own newest rows.

An operator on NATS does not poll its peers: it publishes what it scraped, once per
scrape, on `<prefix>.<site>` (the relay format, `latest` rows only: one sample per
provider, so no byte is sent twice), with its clock in `X-Grid-Time` for readers to
re-base the stamps as on the mesh. A publish while the connection is down (or before
any server accepted this site's certificate) is counted and skipped, without waiting
(`relay/nats_connection.py`): the next scrape publishes newer rows, and the client
reconnects on its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter

from gridroute.clock import wall
from gridroute.relay.nats_connection import NatsConnection, NotConnected
from gridroute.relay.nats_link import NatsLink
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
        clock: Callable[[], float] = wall,
    ) -> None:
        self.link = link
        self.site = site
        self.subject = link.subject(site)
        self._metrics = metrics
        self._clock = clock
        self._conn = NatsConnection(link, f"gridroute-operator-{site}", error_cb=self._on_error)
        self.refusals: list[str] = []
        """Errors the server sent back (a permissions violation, a refused certificate)."""

    async def _on_error(self, exc: Exception) -> None:
        text = str(exc)
        self.refusals = [*self.refusals[-15:], text]
        log.warning("nats: %s", text)

    async def publish(self, body: bytes) -> bool:
        """Publish one body; True when it left for the server (never raises)."""
        try:
            nc = await self._conn.get()
            if not nc.is_connected:
                self._metrics.published.labels("disconnected").inc()
                return False
            headers = {TIME_HEADER: f"{self._clock():.3f}"}
            await nc.publish(self.subject, body, headers=headers)
        except NotConnected:  # no server yet, or none accepts us: never waits long
            self._metrics.published.labels("disconnected").inc()
            return False
        except Exception as exc:  # a broken connection
            self._metrics.published.labels("error").inc()
            log.debug("nats publish failed: %s", exc)
            return False
        self._metrics.published.labels("ok").inc()
        self._metrics.bytes.inc(len(body))
        return True

    async def flush(self) -> None:
        nc = self._conn.client
        if nc is not None and nc.is_connected:
            await nc.flush(timeout=self.link.flush_timeout_s)

    async def close(self) -> None:
        await self._conn.close()
