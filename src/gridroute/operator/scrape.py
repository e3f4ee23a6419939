"""Scraping one provider's metrics endpoint into `Sample`s, with the MetricsAvailable condition.

A failed scrape (unreachable, timeout, non-200, malformed page, no load series) is
counted by result and flips the provider's `MetricsAvailable` condition to False
with the error, logged once on the transition (and once on recovery). For
`staleMetricsSeconds` after the last good scrape the provider keeps publishing its
last readiness (a sample with `ready` only: no load, no generation, so nothing is
learned from it); after that it publishes nothing and goes silent at every reader.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from gridroute.core.sample import Sample
from gridroute.operator.config import MetricsTLS, ProviderConfig, metrics_files
from gridroute.operator.metrics import OperatorMetrics
from gridroute.relay.bounded_body import BodyTooLarge, read_bounded
from gridroute.tls import load_context
from gridroute.wire.prometheus import MAX_EXPOSITION_BYTES, ExpositionError, parse_exposition

log = logging.getLogger(__name__)

CONDITION = "MetricsAvailable"


@dataclass(frozen=True, slots=True)
class Condition:
    """A Kubernetes-style condition as shown on `GET /status`."""

    type: str
    status: bool
    reason: str
    message: str
    last_transition: float


class ScrapeFailed(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def metrics_ssl(tls: MetricsTLS | None) -> ssl.SSLContext | None:
    """The client context for an https metrics endpoint, or None for the default."""
    if tls is None:
        return None
    ctx = load_context(metrics_files(tls, "metricsConfig.tls"), "operator config")
    if tls.insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class ProviderScraper:
    """State of one provider's scrapes: the last good readiness and the condition."""

    def __init__(
        self,
        site: str,
        provider: ProviderConfig,
        *,
        metrics: OperatorMetrics,
        clock: Callable[[], float],
        logger: logging.Logger = log,
    ) -> None:
        self.site = site
        self.provider = provider
        self.generation = provider.config_generation()
        self.condition: Condition | None = None
        """None for a provider without metricsConfig (it publishes no load)."""
        self.last_ok_at: float | None = None
        self.last_ready: float | None = None
        self.last_sample: Sample | None = None
        self._metrics = metrics
        self._clock = clock
        self._log = logger
        mc = provider.metrics_config
        self._ssl = metrics_ssl(mc.tls) if mc is not None else None

    @property
    def measured(self) -> bool:
        return self.provider.metrics_config is not None

    async def scrape(self, session: aiohttp.ClientSession, timeout_s: float) -> Sample | None:
        """Scrape once; the sample to publish now, or None (unmeasured or silent)."""
        if self.provider.metrics_config is None:
            return None
        name = self.provider.name
        try:
            text = await self._fetch(session, timeout_s)
            mc = self.provider.metrics_config
            load = parse_exposition(text, mc.format, mc.pool_name)
        except ScrapeFailed as failed:
            return self._failed(failed.reason, str(failed))
        except ExpositionError as exc:
            return self._failed(exc.reason, str(exc))
        now = self._clock()
        sample = Sample(
            site=self.site,
            provider=name,
            at=now,
            running=load.running,
            waiting=load.waiting,
            ready=load.ready,
            held=load.held,
            deepest_queue=load.deepest_queue,
            kv_usage=load.kv_usage,
            max_running=self.provider.max_running,
            generation=self.generation,
        ).sanitized()
        self.last_ok_at, self.last_ready, self.last_sample = now, sample.ready, sample
        self._metrics.scrapes.labels(name, "ok").inc()
        self._metrics.ready.labels(name).set(sample.endpoints)
        if sample.in_flight is not None:
            self._metrics.in_flight.labels(name).set(sample.in_flight)
        if sample.capacity is not None:
            self._metrics.capacity.labels(name).set(sample.capacity)
        pool = self.provider.metrics_config.pool_name
        read = f"{load.format.value} metrics scraped" + (f" (pool {pool})" if pool else "")
        self._set_condition(True, "ScrapeSucceeded", read)
        return sample

    async def _fetch(self, session: aiohttp.ClientSession, timeout_s: float) -> str:
        mc = self.provider.metrics_config
        assert mc is not None
        headers = {"Accept": "text/plain"}
        if mc.bearer_token_file is not None:
            try:
                token = mc.bearer_token_file.read_text().strip()
            except OSError as exc:
                raise ScrapeFailed("token", f"bearer token file: {exc}") from exc
            headers["Authorization"] = f"Bearer {token}"
        try:
            async with session.get(
                mc.endpoint,
                headers=headers,
                ssl=self._ssl if self._ssl is not None else True,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as resp:
                if resp.status != 200:
                    raise ScrapeFailed("http_error", f"HTTP {resp.status} from {mc.endpoint}")
                try:
                    page = await read_bounded(resp, MAX_EXPOSITION_BYTES)
                except BodyTooLarge as exc:
                    raise ScrapeFailed("too_large", str(exc)) from None
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            detail = str(exc) or "timed out"
            raise ScrapeFailed("unreachable", f"{type(exc).__name__}: {detail}") from exc
        return page.decode("utf-8", "replace")

    def _failed(self, reason: str, message: str) -> Sample | None:
        name = self.provider.name
        self._metrics.scrapes.labels(name, reason).inc()
        self._set_condition(False, "ScrapeFailed", f"{reason}: {message}")
        assert self.provider.metrics_config is not None
        stale_s = self.provider.metrics_config.stale_metrics_seconds
        now = self._clock()
        if self.last_ok_at is None or now - self.last_ok_at > stale_s:
            return None
        return Sample(
            site=self.site,
            provider=name,
            at=now,
            ready=self.last_ready if self.last_ready is not None else 1.0,
            max_running=self.provider.max_running,
        )

    def _set_condition(self, ok: bool, reason: str, message: str) -> None:
        prior = self.condition
        if prior is not None and prior.status == ok:
            if prior.message != message:
                self.condition = Condition(CONDITION, ok, reason, message, prior.last_transition)
            return
        self.condition = Condition(CONDITION, ok, reason, message, self._clock())
        self._metrics.metrics_available.labels(self.provider.name).set(1 if ok else 0)
        if not ok:
            self._log.warning(
                "provider %s: MetricsAvailable=False: %s", self.provider.name, message
            )
        elif prior is not None:
            self._log.info("provider %s: MetricsAvailable=True again", self.provider.name)
