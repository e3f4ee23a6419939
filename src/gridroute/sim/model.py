"""The simulated world: sites with slots and a queue, operators that scrape and poll, and
the network between sites.

These objects hold state and answer questions; they schedule nothing. The engine
(`engine.py`) owns the clock and calls into them, which keeps each rule here readable
on its own: what a scrape reports, what a poll learns, what a partition blocks.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Generator
from random import Random

from gridroute.core.flow import Feed, Step
from gridroute.core.sample import Sample
from gridroute.sim.scenario import ServiceSpec

PROVIDER = "default"
"""Every simulated site runs one provider; its candidate key is `SITE/default`."""


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


class SimRequest:
    """One client request, from its first send to its end (answer, failure or refusal).

    Its course is the core's request flow (`flow`), the same generator the gateway
    drives; the engine carries out each step and sends back what happened."""

    __slots__ = ("client", "flow", "held", "key", "sent_at", "serial", "site")

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


class SimSite:
    """A site's backend: `slots` requests in service, a FIFO queue past full."""

    __slots__ = ("busy", "key", "name", "queue", "scale", "serving", "slots", "up")

    def __init__(self, name: str, slots: int, scale: float) -> None:
        self.name = name
        self.key = f"{name}/{PROVIDER}"
        self.slots = slots
        self.scale = scale
        self.busy = 0
        self.queue: deque[SimRequest] = deque()
        self.serving: set[SimRequest] = set()
        self.up = True

    def sample(self, at: float) -> Sample:
        """What a scrape of this site reports: one endpoint, its running and waiting."""
        return Sample(
            site=self.name,
            provider=PROVIDER,
            at=at,
            running=float(self.busy),
            waiting=float(len(self.queue)),
            ready=1.0,
            max_running=float(self.slots),
            generation=1,
        )

    @property
    def rho(self) -> float:
        """True load over slots (in service plus queued), for plots."""
        return (self.busy + len(self.queue)) / self.slots


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


class SimOperator:
    """One site's operator: scrapes its site, polls its peers, serves what it knows.

    It relays the newest sample of each site (its own scrape, and each peer's own scrape
    as of the last poll that reached that peer), and for each peer the end of its last
    poll round that tried it: the judgement time the gateway's liveness rule reads.
    A round that fails to reach a peer still counts as tried, which is what lets a
    partitioned peer be judged silent.
    """

    __slots__ = ("_rows", "own", "peers", "rounds", "site")

    def __init__(self, site: str) -> None:
        self.site = site
        self.own: Sample | None = None
        self.peers: dict[str, Sample] = {}
        self.rounds: dict[str, float | None] = {}
        self._rows: list[Sample] | None = None

    def scrape(self, site: SimSite, at: float) -> None:
        """Scrape the local backend; a down backend answers nothing (no new sample)."""
        if site.up:
            self.own = site.sample(at)
            self._rows = None

    def poll(self, peers: list[SimOperator], network: Network, at: float) -> None:
        """One poll round over every peer: learn the newest sample of those reachable."""
        for peer in peers:
            self.rounds[peer.site] = at
            if peer.own is None or not network.reachable(self.site, peer.site):
                continue
            known = self.peers.get(peer.site)
            if known is None or peer.own.at > known.at:
                self.peers[peer.site] = peer.own
                self._rows = None

    def restart(self) -> None:
        """A restarted operator has lost its peer rows and has run no poll round yet."""
        self.peers.clear()
        self.rounds.clear()
        self._rows = None

    def rows(self) -> list[Sample]:
        """Every sample this operator serves (cached until it changes)."""
        if self._rows is None:
            rows = [] if self.own is None else [self.own]
            rows.extend(self.peers.values())
            self._rows = rows
        return self._rows
