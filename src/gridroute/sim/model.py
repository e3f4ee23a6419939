"""The simulated world: sites with slots and a queue, operators that scrape and poll, and
the network between sites.

These objects hold state and answer questions; they schedule nothing. The engine
(`engine.py`) owns the clock and calls into them, which keeps each rule here readable
on its own: what a scrape reports, what a poll learns, what a partition blocks.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Generator, Mapping
from dataclasses import replace
from random import Random

from gridroute.core.demand import DemandReport, received
from gridroute.core.flow import Feed, Step
from gridroute.core.gateway_load import ReportSums
from gridroute.core.sample import Sample
from gridroute.sim.scenario import PROVIDER, ServiceSpec, SizeSpec
from gridroute.sim.sessions import KvCache


class ServiceTimes:
    """Draws service times with the scenario's mean and distribution from one seeded source."""

    __slots__ = ("_dist", "_mean", "_mu", "_rng", "_sigma")

    def __init__(self, spec: ServiceSpec, rng: Random) -> None:
        self._dist = spec.distribution
        self._mean = spec.mean_s
        self._sigma = spec.sigma
        # Lognormal with mean `mean_s`: E[X] = exp(mu + sigma^2 / 2).
        self._mu = math.log(spec.mean_s) - spec.sigma * spec.sigma / 2.0
        self._rng = rng

    def draw(self) -> float:
        if self._dist == "constant":
            return self._mean
        if self._dist == "exponential":
            return self._rng.expovariate(1.0 / self._mean)
        return self._rng.lognormvariate(self._mu, self._sigma)


class Sizes:
    """Draws request sizes (service-time multipliers with mean 1) from one seeded source."""

    __slots__ = ("_const", "_mu", "_rng", "_sigma")

    def __init__(self, spec: SizeSpec, rng: Random) -> None:
        self._const = spec.distribution == "constant"
        self._sigma = spec.sigma
        self._mu = -spec.sigma * spec.sigma / 2.0
        self._rng = rng

    def draw(self) -> float:
        if self._const:
            return 1.0
        return self._rng.lognormvariate(self._mu, self._sigma)


class SimRequest:
    """One client request, from its first send to its end (answer, failure or refusal).

    Its course is the core's request flow (`flow`), the same generator the gateway
    drives; the engine carries out each step and sends back what happened."""

    __slots__ = (
        "blocks",
        "client",
        "flow",
        "held",
        "held_at",
        "key",
        "sent_at",
        "serial",
        "site",
        "tokens",
    )

    def __init__(self, client: int, sent_at: float) -> None:
        self.client = client
        self.sent_at = sent_at
        """When the client sent it (latency is measured from here)."""
        self.flow: Generator[Step, Feed, None] | None = None
        self.key: str | None = None
        """Candidate key it is in flight to (set while the gateway counts it as its own)."""
        self.site: SimSite | None = None
        self.serial = 0
        """Attempts so far: an event for an earlier attempt (a completion at a site that
        failed meanwhile) is recognised by its serial and ignored."""
        self.held = False
        """In its gateway's admission queue now."""
        self.held_at = 0.0
        """When it began waiting (its place among equals in fair order)."""
        self.blocks: tuple[int, ...] = ()
        """Its prompt's blocks (scenario `sessions`; empty without)."""
        self.tokens = 0
        """Its prompt's tokens (scenario `sessions`)."""


class SimSite:
    """A site's backend: `slots` requests in service, a FIFO queue past full.

    `external` requests (load that no gridroute gateway sent) hold slots too: a level,
    not a stream of requests. They run first and hold their slots for as long as the
    level stands, so a request queued at a site the level holds full is served only
    when the level falls (a real site's outside requests would turn over, FIFO); past
    its slots the level shows in every scrape as waiting work, and never in `queue`.
    """

    __slots__ = (
        "busy",
        "cache",
        "external",
        "key",
        "metrics_up",
        "name",
        "queue",
        "refuses",
        "scale",
        "serving",
        "sizes",
        "slots",
        "times",
        "up",
    )

    def __init__(
        self,
        name: str,
        slots: int,
        scale: float,
        times: ServiceTimes | None = None,
        sizes: Sizes | None = None,
    ) -> None:
        self.name = name
        self.key = f"{name}/{PROVIDER}"
        self.slots = slots
        self.scale = scale
        self.times = times
        self.sizes = sizes
        self.busy = 0
        self.external = 0
        self.queue: deque[SimRequest] = deque()
        self.serving: set[SimRequest] = set()
        self.up = True
        self.metrics_up = True
        self.cache: KvCache | None = None
        """Its KV cache, with scenario `sessions`."""
        self.refuses = False
        """Answers 429 when every slot is busy instead of queueing (`when_full: refuse`)."""

    @property
    def has_slot(self) -> bool:
        """A gridroute request arriving now would start at once (no overshoot)."""
        return self.busy + self.external < self.slots

    def service_s(self) -> float:
        """One request's service time here: the site's distribution, scale and a size."""
        assert self.times is not None
        size = 1.0 if self.sizes is None else self.sizes.draw()
        return self.times.draw() * self.scale * size

    def sample(self, at: float) -> Sample:
        """What a scrape of this site reports: one endpoint, its running and waiting."""
        load = self.busy + self.external
        return Sample(
            site=self.name,
            provider=PROVIDER,
            at=at,
            running=float(min(load, self.slots)),
            waiting=float(len(self.queue) + max(load - self.slots, 0)),
            ready=1.0,
            max_running=float(self.slots),
            generation=1,
        )

    @property
    def rho(self) -> float:
        """True load over slots (in service plus queued, external included), for plots."""
        return (self.busy + self.external + len(self.queue)) / self.slots


class Network:
    """Which sites can reach which: a partitioned site reaches only itself."""

    __slots__ = ("cut",)

    def __init__(self) -> None:
        self.cut: dict[str, int] = {}
        """Partitioned sites (a count, so overlapping partitions of one site nest)."""

    def reachable(self, a: str, b: str) -> bool:
        return a == b or (a not in self.cut and b not in self.cut)

    def partition(self, site: str) -> None:
        self.cut[site] = self.cut.get(site, 0) + 1

    def heal(self, site: str) -> None:
        left = self.cut.get(site, 0) - 1
        if left > 0:
            self.cut[site] = left
        else:
            self.cut.pop(site, None)


GatewaySums = tuple[int, dict[str, float], dict[str, float], dict[str, float], dict[str, float]]
"""One site's gateway reports summed: (gateways reporting, candidate key -> in-flight,
-> demand beyond it, -> unmet demand, -> want; `core/demand.py`)."""


class SimOperator:
    """One site's operator: scrapes its site, polls its peers, serves what it knows.

    It relays the newest sample of each site (its own scrape, and each peer's own scrape
    as of the last poll that reached that peer), and for each peer the end of its last
    poll round that tried it: the judgement time the gateway's liveness rule reads.
    A round that fails to reach a peer still counts as tried, which is what lets a
    partitioned peer be judged silent.

    The worlds it can be put in: scrapes that fail (readiness only for `stale_s`, then
    nothing), half samples, polls of it that are lost (`link_loss`), and a clock
    `skew_s` ahead; every time it serves is on its own clock, and readers re-base.
    It also keeps what its gateways report in flight, and relays each site's sum.
    """

    __slots__ = (
        "_rng",
        "_rows",
        "gateway_reports",
        "half_samples",
        "last_ok_at",
        "link_loss",
        "own",
        "peer_gateways",
        "peers",
        "report_window_s",
        "rounds",
        "site",
        "skew_s",
        "stale_s",
    )

    def __init__(
        self,
        site: str,
        *,
        rng: Random | None = None,
        half_samples: float = 0.0,
        link_loss: float = 0.0,
        skew_s: float = 0.0,
        stale_s: float = 10.0,
        report_window_s: float = 5.0,
    ) -> None:
        self.site = site
        self.own: Sample | None = None
        self.peers: dict[str, Sample] = {}
        self.rounds: dict[str, float | None] = {}
        self._rows: list[Sample] | None = None
        self._rng = rng or Random(0)
        self.half_samples = half_samples
        self.link_loss = link_loss
        self.skew_s = skew_s
        self.stale_s = stale_s
        self.report_window_s = report_window_s
        self.last_ok_at: float | None = None
        self.gateway_reports: dict[int, tuple[float, dict[str, int], DemandReport]] = {}
        self.peer_gateways: dict[str, tuple[float, GatewaySums]] = {}

    def clock(self, t: float) -> float:
        """This operator's clock at true time `t`."""
        return t + self.skew_s

    def scrape(self, site: SimSite, at: float) -> None:
        """Scrape the local backend; a down backend answers nothing (no new sample), failing
        metrics give readiness only for `stale_s`, and a half sample lacks queue and
        maxRunning and generation."""
        if not site.up:
            return
        now = self.clock(at)
        if not site.metrics_up:
            if self.last_ok_at is None or at - self.last_ok_at > self.stale_s:
                return
            self.own = Sample(
                site=site.name, provider=PROVIDER, at=now, ready=1.0, max_running=site.slots
            )
        else:
            self.last_ok_at = at
            sample = site.sample(now)
            if self.half_samples > 0 and self._rng.random() < self.half_samples:
                sample = Sample(
                    site=sample.site,
                    provider=sample.provider,
                    at=sample.at,
                    running=sample.running,
                    ready=sample.ready,
                )
            self.own = sample
        self._rows = None

    def poll(self, peers: list[SimOperator], network: Network, at: float) -> None:
        """One poll round over every peer: learn the newest sample of those reachable."""
        now = self.clock(at)
        for peer in peers:
            self.rounds[peer.site] = now
            if not network.reachable(self.site, peer.site):
                continue
            if peer.link_loss > 0 and self._rng.random() < peer.link_loss:
                continue
            # Re-based by the responder's Date: its clock minus ours.
            offset = self.skew_s - peer.skew_s
            self.peer_gateways[peer.site] = (now, peer.own_gateway_sums(at))
            if peer.own is None:
                continue
            row = peer.own if offset == 0 else replace(peer.own, at=peer.own.at + offset)
            known = self.peers.get(peer.site)
            if known is None or row.at > known.at:
                self.peers[peer.site] = row
                self._rows = None

    def restart(self) -> None:
        """A restarted operator has lost its peer rows and has run no poll round yet."""
        self.peers.clear()
        self.rounds.clear()
        self.peer_gateways.clear()
        self.gateway_reports.clear()
        self._rows = None

    def rows(self) -> list[Sample]:
        """Every sample this operator serves (cached until it changes)."""
        if self._rows is None:
            rows = [] if self.own is None else [self.own]
            rows.extend(self.peers.values())
            self._rows = rows
        return self._rows

    # -- gateway reports ------------------------------------------------------------

    def report(
        self,
        gateway: int,
        counts: Mapping[str, int],
        at: float,
        demand: DemandReport | None = None,
    ) -> None:
        """A local gateway's own in-flight per candidate (and its demand), sent with its
        poll."""
        self.gateway_reports[gateway] = (at, dict(counts), received(counts, demand))

    def own_gateway_sums(self, at: float) -> GatewaySums:
        """This site's gateways' reports within the window, summed per candidate."""
        sums = ReportSums()
        for seen, counts, demand in self.gateway_reports.values():
            if at - seen <= self.report_window_s:
                sums.add(counts, demand)
        return sums.gateways, sums.in_flight, sums.demand, sums.unmet, sums.want

    def gateway_sums(self, at: float) -> dict[str, GatewaySums]:
        """What it serves to its gateways: its own site's sums and each peer's, as of the
        last poll that reached the peer, dropping those older than the window."""
        now = self.clock(at)
        out = {self.site: self.own_gateway_sums(at)}
        for site, (seen, sums) in self.peer_gateways.items():
            if now - seen <= self.report_window_s:
                out[site] = sums
        return out
