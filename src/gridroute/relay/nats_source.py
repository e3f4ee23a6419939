"""The gateway's signals source over NATS: subscribe to every site's subject, read as a poll.

Each operator publishes its own newest sample on `<prefix>.<site>` (relay format,
`wire/signals.py`, with the publisher's clock in `X-Grid-Time`). This source keeps the
last few samples per provider as messages arrive and answers `poll()` like the mesh's
`SignalsClient`, so the gateway's signals loop, the core and every silence rule stay
the same:

* `poll()` first makes a round trip to the server (`flush`: PING/PONG). It proves the
  subscription is live and that every message the server had for us has arrived. A
  failed round trip (disconnected, stalled) is `unreachable`, and the loop changes
  nothing, which pauses the silence judgement instead of silencing every site.
* A good read returns every stored sample and judges every site heard from at this
  read (`round_ends[site] = now`), as an operator judges a peer at the end of the
  round that tried it: a site whose operator stopped publishing ages out of its
  window and goes silent; it comes back after two new samples, as on the mesh.
* Rows are decoded with `expected_site` = the subject's site, so a row naming another
  site is dropped as `site_mismatch` and counted, even if the server's permissions
  were misconfigured. Bodies over the read limit and rows of providers past the cap
  are dropped the same way as on the mesh.
* With a `reporter` (the gateway's own in-flight, for the fair share among gateways),
  each read first publishes this gateway's counts on
  `<gateway prefix>.<site>.<gateway id>`, and the read's `Decoded.gateways` carries
  every site's fresh gateway sums, this gateway's included, as an operator relays them
  on the mesh (`relay/nats_gateway_reports.py`). A report the server refuses (this
  gateway's user may not publish there) turns the sums off, so the share keeps its
  fallback rather than reading this gateway as the only one.
"""

from __future__ import annotations

import logging
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gridroute.clock import wall
from gridroute.core.demand import DemandReport
from gridroute.relay.nats_connection import NatsConnection
from gridroute.relay.nats_gateway_reports import GatewayReportBoard
from gridroute.relay.nats_link import NatsLink
from gridroute.relay.poller import (
    PollLimits,
    PollMetrics,
    PollOutcome,
    PollResult,
    log_change,
    steady_offset,
)
from gridroute.wire.gateway_report import render_demand, render_in_flight
from gridroute.wire.signals import (
    NAME_RE,
    READ_LIMIT_BYTES,
    TIME_HEADER,
    Decoded,
    DropReason,
    Received,
    RelayUndecodable,
    decode_relay,
)

log = logging.getLogger(__name__)

SAMPLES_PER_PROVIDER = 8
"""Samples kept per provider, as many as an operator relays on the mesh."""
MAX_SITES = 4096
"""Sites accepted; a message from a site past this is dropped as `cap`."""


@dataclass(frozen=True, slots=True)
class OwnReport:
    """Who this gateway is, and how to take its own in-flight per candidate now."""

    site: str
    gateway: str
    take: Callable[[], Mapping[str, int]]
    demand: Callable[[], DemandReport | None] = lambda: None
    """Its demand as of the last `take` (None: it does not follow demand)."""


class NatsSignalsSource:
    """Reads every site's rows from NATS; `poll()` answers like a `/signals` poll."""

    def __init__(
        self,
        link: NatsLink,
        *,
        metrics: PollMetrics,
        name: str = "gridroute-gateway",
        limits: PollLimits | None = None,
        clock: Callable[[], float] = wall,
        logger: logging.Logger = log,
        reporter: OwnReport | None = None,
    ) -> None:
        self.link = link
        self.reporter = reporter
        self.reports = GatewayReportBoard(link.gateway_subject_prefix, link.report_window_s)
        self.report_refused: str | None = None
        """The server's refusal of this gateway's report, once it sent one."""
        self.target = "nats"
        self.name = name
        self.limits = limits or PollLimits(max_lines=32_768)
        self._metrics = metrics
        self._clock = clock
        self._log = logger
        self._conn = NatsConnection(
            link,
            name,
            error_cb=self._on_error,
            disconnected_cb=self._on_disconnected,
            reconnected_cb=self._on_reconnected,
        )
        self._subscribed = False
        self._samples: dict[tuple[str, str], deque[Received]] = {}
        self._offsets: dict[str, float] = {}
        self._dropped: Counter[str] = Counter()
        self._bytes = 0
        self.messages = 0
        """Messages accepted since start (for tests and /grid/status)."""
        self.failing = False
        self.latest: PollOutcome | None = None

    # --- connection -------------------------------------------------------------------

    async def _connect(self) -> Any:
        nc = await self._conn.get()  # NotConnected at once while no server accepts us
        if not self._subscribed:
            await nc.subscribe(f"{self.link.subject_prefix}.*", cb=self._on_message)
            if self.reporter is not None:
                await nc.subscribe(f"{self.link.gateway_subject_prefix}.>", cb=self._on_report)
            self._subscribed = True
        return nc

    async def _on_error(self, exc: Exception) -> None:
        text = str(exc)
        own = self._own_subject()
        if own is not None and "permissions violation" in text.lower() and own in text:
            if self.report_refused is None:
                self._log.warning("nats: the server refuses this gateway's report: %s", text)
            self.report_refused = text
        self._log.debug("nats: %s", exc)

    def _own_subject(self) -> str | None:
        rep = self.reporter
        return None if rep is None else self.reports.subject(rep.site, rep.gateway)

    async def _on_disconnected(self) -> None:
        self._log.info("nats: disconnected; reconnecting")

    async def _on_reconnected(self) -> None:
        self._log.info("nats: reconnected to %s", getattr(self._conn.client, "connected_url", "?"))

    async def close(self) -> None:
        await self._conn.close()
        self._subscribed = False

    # --- messages ---------------------------------------------------------------------

    async def _on_message(self, msg: Any) -> None:
        self.ingest(msg.subject, msg.data, msg.headers or {})

    async def _on_report(self, msg: Any) -> None:
        if msg.subject != self._own_subject():  # our own echo: recorded when published
            self.reports.ingest(msg.subject, msg.data, self._clock(), msg.headers)

    async def _publish_report(self, nc: Any) -> None:
        """This gateway's own counts, on its subject and into its own board."""
        rep = self.reporter
        if rep is None:
            return
        counts = dict(rep.take())
        demand = rep.demand()
        extra = render_demand(demand) if demand is not None else {}
        await nc.publish(
            self.reports.subject(rep.site, rep.gateway),
            render_in_flight(counts).encode(),
            headers=extra or None,
        )
        self.reports.record(rep.site, rep.gateway, counts, self._clock(), demand)

    def ingest(self, subject: str, data: bytes, headers: dict[str, str]) -> None:
        """Fold one message into the store (synchronous: the pure part of a message)."""
        prefix, _, site = subject.rpartition(".")
        if prefix != self.link.subject_prefix or not NAME_RE.fullmatch(site):
            self._dropped[DropReason.SITE_MISMATCH.value] += 1
            return
        if len(data) > min(self.limits.read_limit_bytes, READ_LIMIT_BYTES):
            self._dropped["too_large"] += 1
            return
        try:
            sent = float(headers.get(TIME_HEADER, ""))
        except ValueError:
            self._dropped["no_date"] += 1
            return
        if site not in self._offsets and len(self._offsets) >= MAX_SITES:
            self._dropped[DropReason.CAP.value] += 1
            return
        received_at = self._clock()
        offset = self._steady_offset(site, received_at - sent)
        try:
            decoded = decode_relay(
                data,
                date=sent,
                offset=offset,
                expected_site=site,
                max_lines=self.limits.max_lines,
                max_providers=self.limits.max_providers,
            )
        except RelayUndecodable:  # garbage on the subject: dropped whole, counted
            self._dropped["undecodable"] += 1
            return
        for reason, count in decoded.dropped.items():
            self._dropped[str(reason)] += count
        self._bytes += len(data)
        self.messages += 1
        for rec in decoded.received:
            key = (rec.sample.site, rec.sample.provider)
            kept = self._samples.get(key)
            if kept is None:
                kept = self._samples[key] = deque(maxlen=SAMPLES_PER_PROVIDER)
            if kept and kept[-1].stamp_ms >= rec.stamp_ms:
                continue  # a repeat or an older sample: the newest stands
            kept.append(rec)

    def _steady_offset(self, site: str, observed: float) -> float:
        """One offset per site, moved only down or by a clock step (as the mesh poller)."""
        offset = self._offsets[site] = steady_offset(self._offsets.get(site), observed)
        return offset

    # --- the poll ---------------------------------------------------------------------

    async def poll(self) -> PollOutcome:
        """A round trip to the server, then every stored row; never raises."""
        started = self._clock()
        try:
            nc = await self._connect()
            # While the client reconnects, nats-py's flush returns at once without a
            # PING/PONG (its read loop is down), so it proves nothing: ask first.
            if not nc.is_connected:
                raise ConnectionError("disconnected from the server (reconnecting)")
            await self._publish_report(nc)
            await nc.flush(timeout=self.link.flush_timeout_s)
        except Exception as exc:  # every client failure is one result: unreachable
            outcome = PollOutcome(
                self.target,
                PollResult.UNREACHABLE,
                started,
                self._clock(),
                error=f"{type(exc).__name__}: {exc}".strip().rstrip(":"),
            )
            self._record(outcome)
            return outcome
        ended = self._clock()
        received = tuple(r for kept in self._samples.values() for r in kept)
        sites = {site for site, _ in self._samples}
        dropped = dict(self._dropped)
        self._dropped.clear()
        for reason, count in self.reports.take_dropped().items():
            dropped[f"report_{reason}"] = dropped.get(f"report_{reason}", 0) + count
        reporting = self.reporter is not None and self.report_refused is None
        decoded = Decoded(
            received=received,
            round_ends=dict.fromkeys(sites, ended),
            dropped={DropReason(k): v for k, v in dropped.items() if k in _DROP_VALUES},
            lines=len(received),
            gateways=self.reports.sums(ended) if reporting else {},
        )
        outcome = PollOutcome(
            self.target,
            PollResult.OK,
            started,
            ended,
            decoded=decoded,
            body_bytes=self._bytes,
            dropped=dropped,
        )
        self._bytes = 0
        self._record(outcome)
        return outcome

    def _record(self, outcome: PollOutcome) -> None:
        self._metrics.count(outcome)
        self.latest = outcome
        self.failing = log_change(self._log, self.failing, outcome, "signals from nats")


_DROP_VALUES = {r.value for r in DropReason}
