"""One gateway worker: config, live grid, pools, metrics, probes and the signals loop.

`Gateway` owns everything with a lifetime; the aiohttp app (`gateway.app`) and the
request path (`gateway.proxy`) read its attributes. `reload` swaps in a new config
without dropping warm pools of unchanged backends, the learning about candidates
that stay, or requests in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import Callable
from pathlib import Path

from aiohttp import web
from prometheus_client import CollectorRegistry

from gridroute.config import ConfigError
from gridroute.core import AffinityTable
from gridroute.core.prefix import PrefixMap
from gridroute.gateway.api_keys import ApiKeys
from gridroute.gateway.backends import Backends, ssl_context
from gridroute.gateway.claims import ClaimBounds, ClaimClamp
from gridroute.gateway.config import GatewayConfig, OperatorLink, load_config
from gridroute.gateway.current import CurrentGrid
from gridroute.gateway.health import HealthProber
from gridroute.gateway.load_report import LoadReport, gateway_id
from gridroute.gateway.metrics import GatewayMetrics
from gridroute.gateway.overlay_watch import OverlayWatch
from gridroute.gateway.routing import build_routing
from gridroute.gateway.shedding_state import SheddingState
from gridroute.gateway.signals_loop import SignalsLoop, SignalsSource
from gridroute.gateway.status import DecisionHistory
from gridroute.gateway.timeline import Timeline
from gridroute.gateway.tracing import RequestTracer, make_tracer
from gridroute.inbound.client_errors import ClientErrors
from gridroute.inbound.guard import Guard
from gridroute.relay.nats_link import Transport
from gridroute.relay.nats_source import NatsSignalsSource, OwnReport
from gridroute.relay.poller import LOCAL_LIMITS, PollLimits, PollMetrics, SignalsClient
from gridroute.relay.prometheus_source import PrometheusSource

log = logging.getLogger("gridroute.gateway")

SourceFactory = Callable[[OperatorLink, PollMetrics], SignalsSource]


def operator_source(op: OperatorLink, metrics: PollMetrics) -> SignalsSource:
    """The bounded `/signals` client toward the local operator (the operator's own poller)."""
    ctx: ssl.SSLContext | None = None
    if op.tls is not None:
        made = ssl_context(op.tls)
        ctx = made if isinstance(made, ssl.SSLContext) else None
        if ctx is not None:
            if op.identity is not None:
                ctx.check_hostname = False
            # As the operator's own poller (`client_ssl_context`): under TLS 1.3 a refused
            # client certificate is a bare disconnect after the handshake (`unreachable`);
            # under 1.2 it is a handshake alert, so the poll reads `unauthorized`.
            ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    limits = PollLimits(
        timeout_s=op.timeout_s,
        read_limit_bytes=op.max_response_bytes,
        max_lines=LOCAL_LIMITS.max_lines,
        max_providers=LOCAL_LIMITS.max_providers,
    )
    return SignalsClient(
        "local",
        op.url.rstrip("/") + "/signals",
        metrics=metrics,
        ssl_context=ctx,
        expected_identity=op.identity,
        limits=limits,
    )


def _keys(cfg: GatewayConfig) -> ApiKeys | None:
    path = cfg.auth.api_keys_file
    return None if path is None else ApiKeys.load(path)


def claim_bounds(cfg: GatewayConfig) -> ClaimBounds:
    """The capacity bounds of `cfg` (per candidate key, and the global factor)."""
    return ClaimBounds(
        {s.key: s.max_capacity for s in cfg.sites if s.max_capacity is not None},
        cfg.limits.claimed_capacity_factor,
        cfg.availability.ceiling_floor,
    )


class Gateway:
    """Everything one gateway worker runs; `start` and `stop` bracket its life."""

    def __init__(
        self,
        cfg: GatewayConfig,
        *,
        config_path: str | Path | None = None,
        registry: CollectorRegistry | None = None,
        tracer: RequestTracer | None = None,
        source_factory: SourceFactory = operator_source,
        worker: int = 0,
    ) -> None:
        self.cfg = cfg
        self.worker = worker
        """This process's index among `workers` (each is a whole gateway)."""
        self.config_path = config_path
        self.routing = build_routing(cfg)
        self.current = CurrentGrid(self.routing, cfg.availability)
        self.current.affinity = AffinityTable(cfg.affinity.max_entries, cfg.affinity.ttl_s)
        self.affinity_header = cfg.affinity.header
        pa = cfg.prefix_affinity
        self.current.prefixes = PrefixMap(pa.max_entries, pa.ttl_s)
        self.backends = Backends()
        self.metrics = GatewayMetrics(registry)
        self.refusals = SheddingState()
        self.metrics.watch(lambda: self.current, self.refusals.shedding)
        self.metrics.watch_pools(self.backends)
        self.poll_metrics = PollMetrics(self.metrics.registry)
        self.client_errors = ClientErrors(
            self.metrics.registry, "grid_route", interval_s=cfg.listener.error_log_interval_s
        )
        self.guard = Guard(cfg.listener, self.client_errors)
        """The API listener's bounds (`GuardedRunner(create_app(gw), guard=gw.guard)`)."""
        self.tracer = tracer if tracer is not None else make_tracer(cfg.tracing)
        self.max_body = cfg.limits.max_body_bytes
        self.api_keys = _keys(cfg)
        """Accepted API keys (`auth.api_keys_file`), or None when none are needed."""
        self.draining = False
        self.started_at = 0.0
        self.reloads: dict[str, int] = {"ok": 0, "error": 0}
        self.last_reload_error: str | None = None
        self._source_factory = source_factory
        self.signals: SignalsLoop | None = None
        self.claims = ClaimClamp(claim_bounds(cfg), self._learned_soft, self.metrics.registry)
        """Bounds on the capacity samples may claim (`gateway.claims`)."""
        self.prober = HealthProber(cfg.health, self.backends, lambda: self.current)
        self.history = DecisionHistory()
        self.timeline = Timeline()
        self._tasks: list[asyncio.Task[None]] = []
        self.overlay: OverlayWatch | None = None
        """The routing overlay (`overlay:` in the config), None without one."""
        if cfg.overlay is not None:
            self.overlay = OverlayWatch(cfg.overlay, lambda: self.routing, self.metrics.registry)

    def _learned_soft(self, key: str) -> float | None:
        view = self.current.snapshot.view(key)
        return None if view is None else view.soft

    @property
    def ready(self) -> bool:
        """True once the first operator poll and the first probe round have completed."""
        polled = self.signals is None or self.signals.completed > 0
        probed = not self.cfg.health.enabled or self.prober.rounds > 0
        return polled and probed and not self.draining

    async def start(self) -> None:
        await self.backends.sync(self.routing.backends)
        self._start_signals()
        if self.overlay is not None:
            await self.overlay.read_once()  # serve the overlay from the first request on
            self._tasks.append(asyncio.create_task(self._watch_overlay(), name="overlay"))
        if self.cfg.health.enabled:
            self._tasks.append(asyncio.create_task(self.prober.run(), name="health"))
        self._tasks.append(asyncio.create_task(self._record_history(), name="history"))

    async def _watch_overlay(self) -> None:
        assert self.overlay is not None
        await asyncio.sleep(self.overlay.cfg.poll_interval_s)
        await self.overlay.run()

    async def _record_history(self) -> None:
        while True:
            self.history.record(self, self.current.monotonic())
            self.timeline.record(self, time.time())
            await asyncio.sleep(1.0)

    def _start_signals(self) -> None:
        op = self.cfg.operator
        nats = self.cfg.signals.nats if self.cfg.signals.transport is Transport.NATS else None
        source: SignalsSource
        prom = self.cfg.signals.prometheus
        report = None
        if nats is not None:
            report = self._load_report()
            own = None
            if self.cfg.local_site is not None:  # reports name the gateway's site
                mine = report
                own = OwnReport(self.cfg.local_site, mine.ident, mine.take, lambda: mine.demand)
            source = NatsSignalsSource(
                nats, metrics=self.poll_metrics, limits=LOCAL_LIMITS, reporter=own
            )
            interval_s = op.poll_interval_s if op is not None else 1.0
            if own is None:
                report = None
        elif self.cfg.signals.transport is Transport.PROMETHEUS and prom is not None:
            sites = [s.name for s in self.cfg.sites]
            local = self.cfg.local_site if prom.gateway_selector is not None else None
            source = PrometheusSource(prom, sites, self.poll_metrics, local_site=local)
            interval_s = prom.poll_interval_s
            if local is not None:  # every gateway's own in-flight, as Prometheus scraped it
                report = self._load_report()
                report.speaks = False  # its figures reach the others as scraped gauges
                report.unscraped = self.cfg.metrics.listen is None
        elif op is not None:
            source = self._source_factory(op, self.poll_metrics)
            interval_s = op.poll_interval_s
        else:
            return
        if isinstance(source, SignalsClient):  # the real poll carries the load report
            report = self._load_report()
            source.extra_headers = report.headers
        self.signals = SignalsLoop(
            source, lambda: self.current, self.cfg.local_site, interval_s, self.claims, report
        )
        self._tasks.append(asyncio.create_task(self.signals.run(), name="signals"))

    def _load_report(self) -> LoadReport:
        return LoadReport(lambda: self.current, gateway_id(self.worker), self.cfg.local_site)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        if self.signals is not None:
            await self.signals.source.close()
        if self.overlay is not None:
            await self.overlay.close()
        await self.backends.close()
        if self.tracer is not None:  # export the spans still buffered, off the loop
            await asyncio.to_thread(self.tracer.shutdown)

    async def reload(self, cfg: GatewayConfig) -> None:
        """Adopt a new config. `listen`, `workers` and `metrics.listen` need a restart."""
        old = self.cfg
        for name in ("listen", "workers", "metrics", "listener"):
            if getattr(cfg, name) != getattr(old, name):
                log.warning("reload: %s changed; it takes effect at the next restart", name)
        routing = build_routing(cfg)
        keys = _keys(cfg)  # may raise: nothing adopted yet
        await self.backends.sync(routing.backends)  # may raise: nothing adopted yet
        self.api_keys = keys
        self.cfg = cfg
        self.routing = routing
        self.current.reconfigure(self.routing, cfg.availability)
        self.max_body = cfg.limits.max_body_bytes
        if cfg.affinity != old.affinity:
            self.current.affinity = AffinityTable(cfg.affinity.max_entries, cfg.affinity.ttl_s)
            self.affinity_header = cfg.affinity.header
        pa = cfg.prefix_affinity
        if (pa.max_entries, pa.ttl_s) != (
            old.prefix_affinity.max_entries,
            old.prefix_affinity.ttl_s,
        ):
            self.current.prefixes = PrefixMap(pa.max_entries, pa.ttl_s)
        self.prober.cfg = cfg.health
        self.claims.bounds = claim_bounds(cfg)
        if self.overlay is not None:
            if cfg.overlay is None:
                log.warning("reload: overlay removed; it takes effect at the next restart")
            else:
                self.overlay.cfg = cfg.overlay
                self.overlay.forget_source()  # re-checked against the new backends
        elif cfg.overlay is not None:
            log.warning("reload: overlay added; it takes effect at the next restart")
        if cfg.tracing != old.tracing:
            previous, self.tracer = self.tracer, make_tracer(cfg.tracing)
            if previous is not None:
                await asyncio.to_thread(previous.shutdown)
        # The Prometheus queries name the configured sites: a new site list restarts them.
        sites_read = cfg.signals.transport is Transport.PROMETHEUS and [
            s.name for s in cfg.sites
        ] != [s.name for s in old.sites]
        if sites_read or (cfg.operator, cfg.signals, cfg.local_site) != (
            old.operator,
            old.signals,
            old.local_site,
        ):
            if self.signals is not None:
                task = next(t for t in self._tasks if t.get_name() == "signals")
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                self._tasks.remove(task)
                await self.signals.source.close()
                self.signals = None
            self._start_signals()

    def _reloaded(self, result: str) -> None:
        self.reloads[result] += 1
        self.metrics.reload(result)

    async def reload_file(self) -> bool:
        """SIGHUP: re-read the config file; on any error keep the running config."""
        if self.config_path is None:
            return False
        try:
            cfg = load_config(self.config_path)
            await self.reload(cfg)
        except ConfigError as exc:
            self._reloaded("error")
            self.last_reload_error = str(exc)
            log.error("reload refused, keeping the running config:\n%s", exc)
            return False
        except Exception as exc:  # e.g. an unreadable TLS file in a new backend
            self._reloaded("error")
            self.last_reload_error = f"{type(exc).__name__}: {exc}"
            log.exception("reload failed, keeping the running config")
            return False
        self._reloaded("ok")
        self.last_reload_error = None
        log.warning("reload: config %s adopted", self.config_path)
        return True


GATEWAY = web.AppKey("gateway", Gateway)
"""Where the aiohttp app keeps its `Gateway`."""
