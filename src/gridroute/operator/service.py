"""One site operator: scrape loop, peer poll rounds and the HTTP listener, wired together.

    op = Operator(config)
    await op.start()     # binds the listener, starts both loops
    ...
    await op.stop()

Both loops tick on the monotonic clock and never overlap themselves: each scrape or
poll has a timeout shorter than the interval, so a round always ends before the
next one starts. Each operator owns its Prometheus registry, so several can share
one process (tests do). The peer rounds run on the operator's peer thread
(`peer_thread.py`), so the local gateways' reads are served ahead of peer polling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry

from gridroute.clock import wall
from gridroute.inbound.client_errors import ClientErrors
from gridroute.inbound.guard import Guard, GuardedRunner
from gridroute.inbound.tls_gate import TLSGateSite
from gridroute.operator.config import OperatorConfig
from gridroute.operator.gateway_reports import GatewayReports
from gridroute.operator.learning import ProviderLearning
from gridroute.operator.metrics import OperatorMetrics
from gridroute.operator.peer_access import access_middleware, handshake_refusals, refusal_counter
from gridroute.operator.peer_rounds import POLL_GIVE_UP_ROUNDS, PeerRounds, SkipMetrics
from gridroute.operator.peer_thread import Mailbox, PeerThread
from gridroute.operator.scrape import ProviderScraper
from gridroute.operator.server import build_app
from gridroute.operator.store import RelayStore
from gridroute.operator.tls import client_context, server_context
from gridroute.relay.nats_link import Transport
from gridroute.relay.nats_publisher import NatsPublisher, PublishMetrics
from gridroute.relay.poller import PollLimits, PollOutcome, SignalsClient
from gridroute.wire.identity import spiffe_id

log = logging.getLogger(__name__)

REPORT_WINDOW_S = 5.0
"""A gateway report (or a peer's relayed sum) older than this drops out of the sums."""


class Operator:
    """The site operator process, as an object tests can start several of."""

    def __init__(
        self,
        config: OperatorConfig,
        *,
        clock: Callable[[], float] = wall,
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.metrics = OperatorMetrics(registry or CollectorRegistry())
        self.store = RelayStore(
            config.site,
            samples_per_provider=config.relay_samples_per_provider,
            window_s=config.relay_window_seconds,
            retain_latest_s=config.retain_latest_seconds,
            on_cut=self._count_cut,
        )
        self.gateway_reports = GatewayReports(config.site, window_s=REPORT_WINDOW_S)
        """In-flight reported by this site's gateways, and peers' sums of theirs."""
        self.scrapers = [
            ProviderScraper(config.site, p, metrics=self.metrics, clock=clock)
            for p in config.providers
        ]
        self.learning = {
            p.name: ProviderLearning(f"{config.site}/{p.name}") for p in config.providers
        }
        tls = config.tls
        # One TLS context per peer, so each new connection resumes that peer's session.
        # A poll outlives its round (see peer_rounds.py): it gives up after a few rounds.
        limits = PollLimits(timeout_s=POLL_GIVE_UP_ROUNDS * config.peer_poll_interval_seconds)
        self.peers = [
            SignalsClient(
                peer.site,
                peer.url.rstrip("/") + "/signals?scope=own",
                metrics=self.metrics.poll,
                ssl_context=client_context(tls, resume=True) if tls is not None else None,
                expected_identity=spiffe_id(config.trust_domain, peer.site) if tls else None,
                expected_site=peer.site,
                limits=limits,
                clock=clock,
                logger=logging.getLogger(f"gridroute.operator.{config.site}"),
                delta=True,
            )
            for peer in config.peers
        ]
        self.peer_rounds = PeerRounds(
            self.peers,
            self.store,
            deadline_s=config.peer_timeout_s,
            clock=clock,
            metrics=SkipMetrics(self.metrics.registry),
        )
        self.peer_rounds.on_decoded = self._peer_gateways
        nats = config.signals.nats if config.signals.transport is Transport.NATS else None
        self.publisher = (
            NatsPublisher(
                nats, config.site, metrics=PublishMetrics(self.metrics.registry), clock=clock
            )
            if nats is not None
            else None
        )
        self.peer_thread: PeerThread | None = None
        """Where the peer rounds run once started (before: inline, as tests drive them)."""
        self.rounds = 0
        self.started_at: float | None = None
        self._runner: web.AppRunner | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._session: aiohttp.ClientSession | None = None
        self.port: int | None = None

    def _count_cut(self, cut: Any) -> None:
        for (store, kind), rows in cut.items():
            self.metrics.truncated.labels(store.value, kind.value).inc(rows)

    # --- lifecycle ------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.config
        self.started_at = self.clock()
        errors = ClientErrors(
            self.metrics.registry, "grid_signals", interval_s=cfg.listener.error_log_interval_s
        )
        self.client_errors = errors
        app = build_app(self)
        refused = refusal_counter(self.metrics.registry) if cfg.tls is not None else None
        if refused is not None:
            app.middlewares.append(
                access_middleware(cfg.trust_domain, cfg.allowed_identities, refused, errors)
            )
        self._runner = GuardedRunner(app, guard=Guard(cfg.listener, errors), access_log=None)
        await self._runner.setup()
        site: web.TCPSite
        if cfg.tls is not None and refused is not None:
            site = TLSGateSite(
                self._runner,
                cfg.host,
                cfg.port,
                ssl_context=server_context(cfg.tls),
                on_refused=handshake_refusals(refused, errors),
                handshake_timeout_s=cfg.listener.header_timeout_s,
            )
        else:
            site = web.TCPSite(self._runner, cfg.host, cfg.port)
        await site.start()
        server = site._server
        sockets = getattr(server, "sockets", None) or []
        self.port = sockets[0].getsockname()[1] if sockets else cfg.port
        self._session = aiohttp.ClientSession()
        if self.peers:
            self.peer_thread = PeerThread(f"peers-{cfg.site}")
            self.peer_thread.start()
            self.peer_rounds.deliver = Mailbox(asyncio.get_running_loop()).deliver
        self._tasks = [
            asyncio.create_task(self._every(cfg.scrape_interval_seconds, self.scrape_round)),
            asyncio.create_task(
                self._every(
                    cfg.peer_poll_interval_seconds,
                    self.poll_round,
                    lambda: self.peer_rounds.stretch,
                )
            ),
        ]
        log.info("operator %s listening on %s:%s", cfg.site, cfg.host, self.port)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self.peer_thread is not None:
            await self.peer_thread.run(self._close_peers())
            await self.peer_thread.stop()
            self.peer_thread = None
        else:
            await self._close_peers()
        if self.publisher is not None:
            await self.publisher.close()
        if self._session is not None:
            await self._session.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _close_peers(self) -> None:
        await self.peer_rounds.close()
        for client in self.peers:
            await client.close()

    async def run_forever(self) -> None:
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.stop()

    @staticmethod
    async def _every(
        interval_s: float,
        step: Callable[[], Awaitable[None]],
        stretch: Callable[[], float] = lambda: 1.0,
    ) -> None:
        """Run `step` every `interval_s` x `stretch()` (rounds stretch under overload)."""
        loop = asyncio.get_running_loop()
        next_at = loop.time()
        while True:
            try:
                await step()
            except Exception:  # a bug in one round must not stop the loop
                log.exception("operator round failed")
            next_at = max(next_at + interval_s * stretch(), loop.time())
            await asyncio.sleep(next_at - loop.time())

    # --- rounds ---------------------------------------------------------------------

    async def scrape_round(self) -> None:
        """Scrape every measured provider once, concurrently."""
        assert self._session is not None
        timeout = self.config.scrape_timeout_s
        measured = [s for s in self.scrapers if s.measured]
        samples = await asyncio.gather(*(s.scrape(self._session, timeout) for s in measured))
        for scraper, sample in zip(measured, samples, strict=True):
            if sample is not None:
                self.store.add_local(sample)
                self.learning[scraper.provider.name].add(sample)
        if self.publisher is not None:
            own = self.store.encode(self.clock(), own_only=True, latest_only=True)
            await self.publisher.publish(own.body)

    def _peer_gateways(self, outcome: PollOutcome) -> None:
        """Keep what a peer relayed of its gateways' in-flight (fair share among gateways)."""
        if outcome.decoded is not None:
            self.gateway_reports.peer(outcome.target, outcome.decoded.gateways.get(outcome.target))

    async def poll_round(self) -> None:
        """One peer round (`PeerRounds`): rows stored as each poll completes."""
        if not self.peers:
            return
        if self.peer_thread is not None:
            await self.peer_thread.run(self.peer_rounds.round())
        else:
            await self.peer_rounds.round()
        self.rounds += 1

    # --- status ---------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """What `GET /status` shows: providers with conditions and learned bounds, peers."""
        latest = self.store.latest()
        providers = []
        for scraper in self.scrapers:
            name = scraper.provider.name
            sample = latest.get(f"{self.config.site}/{name}")
            cond = scraper.condition
            learned = self.learning[name].learned
            providers.append(
                {
                    "name": name,
                    "models": scraper.provider.models,
                    "publishesLoad": scraper.measured,
                    "generation": scraper.generation,
                    "conditions": []
                    if cond is None
                    else [
                        {
                            "type": cond.type,
                            "status": "True" if cond.status else "False",
                            "reason": cond.reason,
                            "message": cond.message,
                            "lastTransitionTime": cond.last_transition,
                        }
                    ],
                    "lastScrapeOkAt": scraper.last_ok_at,
                    "latest": None if sample is None else _sample_json(sample),
                    "ceiling": None
                    if learned is None
                    else {
                        "soft": learned.soft,
                        "hard": learned.hard,
                        "effective": learned.effective,
                        "rho": learned.rho,
                    },
                }
            )
        peers = []
        ends = self.store.round_ends
        for client in self.peers:
            last = client.latest
            peers.append(
                {
                    "site": client.target,
                    "url": client.url,
                    "result": None if last is None else last.result.value,
                    "error": None if last is None else last.error,
                    "failing": client.failing,
                    "lastSuccess": None if client.last_ok is None else client.last_ok.ended_at,
                    "lastRoundEnd": ends.get(client.target),
                    "providers": sorted(k for k in latest if k.startswith(client.target + "/")),
                }
            )
        return {
            "site": self.config.site,
            "now": self.clock(),
            "startedAt": self.started_at,
            "pollRounds": self.rounds,
            "providers": providers,
            "peers": peers,
        }


def _sample_json(sample: Any) -> dict[str, Any]:
    return {
        "at": sample.at,
        "running": sample.running,
        "waiting": sample.waiting,
        "ready": sample.ready,
        "held": sample.held,
        "deepestQueue": sample.deepest_queue,
        "kvUsage": sample.kv_usage,
        "inFlight": sample.in_flight,
        "capacity": sample.capacity,
        "generation": sample.generation,
    }
