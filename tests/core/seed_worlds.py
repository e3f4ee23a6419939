"""Generated worlds for the differential tests against the seed rule (issue 23).

A world is one instant of a grid seen from one gateway ("gateway 0"): 2-8 sites of
capacity 1-256, each carrying in-flight from outside gridroute (0-120 % of its
capacity) and from 1-8 gateways (each holding 0-100 % of an equal part of what the
gateways send), some of whose scrapes fail (readiness only) and some of which publish
no load at all. `snapshot` builds what that gateway's core reads: its own counts, the
samples its operator relays, and every gateway's report.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from random import Random

from hypothesis import strategies as st

from gridroute.core import (
    AvailabilitySettings,
    Candidate,
    GridState,
    OwnLoad,
    Policy,
    Sample,
    Snapshot,
    decide,
)
from gridroute.core.gateway_load import combine

MODEL = "m"
NOW = 100.0


@dataclass(frozen=True)
class WorldSite:
    name: str
    capacity: int
    external: int
    """In-flight at the site that no gateway sent."""
    gateways: tuple[int, ...]
    """In-flight each gateway holds there (index 0: the gateway under test)."""
    scrape: str = "ok"
    """ok, failed (readiness only: no load reading) or none (publishes no load)."""
    queued: int = 0
    """Of the in-flight, what waits in the site's queue although slots are free (an EPP
    flow-control queue); past capacity the excess waits as well."""
    finished: int = 0
    """Of gateway 0's in-flight here, what finished after the sample (its counts now are
    lower than the sample's: between samples, as a running gateway reads them)."""

    @property
    def in_flight(self) -> int:
        return self.external + sum(self.gateways)

    @property
    def waiting(self) -> int:
        return max(self.in_flight - self.capacity, min(self.queued, self.in_flight))

    @property
    def running(self) -> int:
        return self.in_flight - self.waiting


@dataclass(frozen=True)
class World:
    sites: tuple[WorldSite, ...]

    @property
    def gateways(self) -> int:
        return len(self.sites[0].gateways)

    @property
    def external_fraction(self) -> float:
        """Of all in-flight at measured sites, the part no gateway sent."""
        total = sum(s.in_flight for s in self.sites if s.scrape == "ok")
        ext = sum(s.external for s in self.sites if s.scrape == "ok")
        return ext / total if total else 0.0


@st.composite
def worlds(
    draw: st.DrawFn,
    external: tuple[float, float] = (0.0, 1.2),
    gateways: tuple[int, int] = (1, 8),
    broken: bool = True,
    finished: bool = False,
) -> World:
    """A world within the issue's ranges; `external` bounds each site's outside load as
    a fraction of its capacity, `broken` allows failed and missing scrapes, `finished`
    lets gateway 0's requests finish after the sample (`WorldSite.finished`)."""
    n = draw(st.integers(2, 8))
    g = draw(st.integers(*gateways))
    sites = []
    for i in range(n):
        cap = draw(st.integers(1, 256))
        ext = round(cap * draw(st.floats(*external)))
        # Each gateway holds 0-100 % of an equal part of what the gateways send here.
        part = max(cap - ext, 0) / g
        held = tuple(round(part * draw(st.floats(0.0, 1.0))) for _ in range(g))
        scrape = (
            draw(st.sampled_from(("ok", "ok", "ok", "ok", "failed", "none"))) if broken else "ok"
        )
        queued = draw(st.sampled_from((0, 0, 0, 1, 3)))
        done = draw(st.integers(0, held[0])) if finished else 0
        sites.append(WorldSite(f"s{i}", cap, ext, held, scrape, queued, done))
    return World(tuple(sites))


def snapshot(
    world: World, settings: AvailabilitySettings | None = None, reread: bool = False
) -> tuple[Snapshot, OwnLoad]:
    """What gateway 0 reads: samples taken at NOW with its own requests started before;
    `reread`: then refreshed once more without reports (as a health change does)."""
    settings = settings or AvailabilitySettings()
    cands = [
        Candidate(s.name, "p", frozenset({MODEL}), local=(i == 0))
        for i, s in enumerate(world.sites)
    ]
    state = GridState(cands, settings, models=[MODEL], rng=None)
    own = OwnLoad()
    for s in world.sites:
        for _ in range(s.gateways[0]):
            own.start(f"{s.name}/p", NOW - 1.0)
    samples = []
    for s in world.sites:
        if s.scrape == "none":
            continue
        loaded = s.scrape == "ok"
        samples.append(
            Sample(
                s.name,
                "p",
                NOW,
                running=s.running if loaded else None,
                waiting=s.waiting if loaded else None,
                ready=1,
                max_running=s.capacity,
                generation=1,
            )
        )
    reports: dict[str, tuple[int, dict[str, float]]] = {}
    for gw in range(world.gateways):
        counts = {f"{s.name}/p": float(s.gateways[gw]) for s in world.sites if s.gateways[gw]}
        reports[f"g{gw}"] = (1, counts)
    mine = {k: int(v) for k, v in reports["g0"][1].items()}
    load = combine(reports, mine)
    rounds = {s.name: NOW for s in world.sites}
    snap = state.refresh(samples, rounds, NOW, {}, own, load)
    if reread:
        snap = state.refresh(samples, rounds, NOW + 0.1, {}, own)
    for s in world.sites:
        for _ in range(s.finished):
            own.end(f"{s.name}/p", NOW + 0.005)
    return snap, own


def shares(snap: Snapshot, own: OwnLoad, policy: Policy, n: int, seed: int) -> Counter[str]:
    """Where the next request goes, over `n` independent draws (own counts fixed): a site
    name, or the outcome (hold, shed, ...) when nothing is routed."""
    rng = Random(seed)
    c: Counter[str] = Counter()
    for _ in range(n):
        d = decide(snap, MODEL, rng, policy, own.counts)
        c[d.view.site if d.view is not None else d.outcome.value] += 1
    return c
