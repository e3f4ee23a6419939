"""Two policies on the same request stream: where they differ, by how much, and why.

`gridroute sim compare SCENARIO --policies gridroute,saturation` runs every client
count of a scenario under each policy with the same seed (the same clients, service
times and worlds) and reports, per site, each policy's share of the completed
requests, its overshoot there, and the difference from the first policy that is not
`gridroute` (the reference, normally the seed rule `saturation`). A difference over
`tolerance` (beyond three standard errors of the reference's share, the noise of its
independent draws) is named by the rule that explains it where one does (`departure`):

* `seed_overshoots`: the reference sent requests past a site's free slots (more
  overshoot than gridroute's, or fewer requests completed): they queued behind load
  it could not move, so every share of the completed requests follows those queues,
  where gridroute admits only into whole free slots;
* `fair_share`: several gateways, and gridroute's side sent less here with no overshoot
  on either side: each gateway keeps to its part of the site's free room;
* `share_ranked`: several gateways, and gridroute's side sent more here with no more
  overshoot: it ranks what other gateways hold at a site at its share (their part is a
  poll old; ranked whole, gateways herd), so a small site with room wins more picks;
* `knock_on`: a site took more because another's departure above gave up load, with
  no overshoot there;
* `unexplained`: nothing in the rules explains it (what the differential tests look for).

The same module makes the generated worlds of the differential harness (`world`), so
the tests, `bench/bench_differential.py` and a user's own scenarios are compared alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from random import Random
from typing import Any

from gridroute.core.select import Policy
from gridroute.sim.engine import RunResult, SimRun
from gridroute.sim.scenario import Scenario

TOLERANCE = 0.05
"""Share points (as a fraction) past which two policies' shares of a site differ."""

SEED_OVERSHOOTS = "seed_overshoots"
FAIR_SHARE = "fair_share"
SHARE_RANKED = "share_ranked"
KNOCK_ON = "knock_on"
UNEXPLAINED = "unexplained"


@dataclass(frozen=True)
class SiteDiff:
    site: str
    shares: dict[str, float]
    """Policy -> share of the completed requests at this site."""
    overshoot: dict[str, int]
    """Policy -> requests that arrived at this site with every slot busy."""
    delta: float
    """gridroute's share minus the reference's."""
    departure: str | None
    """The rule that explains a difference past the tolerance (None within it, or
    "unexplained")."""


@dataclass(frozen=True)
class Comparison:
    clients: int
    rows: dict[str, dict[str, Any]]
    """Policy -> the simulator's row for this client count."""
    sites: list[SiteDiff] = field(default_factory=list)

    @property
    def unexplained(self) -> list[SiteDiff]:
        return [d for d in self.sites if d.departure == UNEXPLAINED]

    def as_dict(self) -> dict[str, Any]:
        return {
            "clients": self.clients,
            "requests": {p: r["requests"] for p, r in self.rows.items()},
            "overshoot": {p: r["overshoot"] for p, r in self.rows.items()},
            "sites": [
                {
                    "site": d.site,
                    "shares": d.shares,
                    "overshoot": d.overshoot,
                    "delta": round(d.delta, 4),
                    "departure": d.departure,
                }
                for d in self.sites
            ],
        }


def compare(sc: Scenario, policies: list[Policy], tolerance: float = TOLERANCE) -> list[Comparison]:
    """Every client count of `sc` under each of `policies` (same seed), compared."""
    out = []
    for clients in sc.client_counts:
        results = {p.value: SimRun(sc, p, clients).run() for p in policies}
        out.append(_compare(sc, clients, results, policies, tolerance))
    return out


def _compare(
    sc: Scenario,
    clients: int,
    results: dict[str, RunResult],
    policies: list[Policy],
    tolerance: float,
) -> Comparison:
    rows = {p: r.row for p, r in results.items()}
    ours = Policy.GRIDROUTE.value if Policy.GRIDROUTE in policies else policies[0].value
    ref = next((p.value for p in policies if p.value != ours), ours)
    several = (sc.gateways if isinstance(sc.gateways, int) else len(sc.gateways)) > 1
    # The reference sent requests past full (they queued there, behind load it could not
    # move): the completed requests' shares follow those queues, so every site's differs.
    queued_past_full = (
        rows[ref]["overshoot"] > rows[ours]["overshoot"]
        or rows[ref]["requests"] < (1.0 - tolerance) * rows[ours]["requests"]
    )
    diffs = []
    for spec in sc.sites:
        name = spec.name
        shares = {p: float(r["shares"][name]) for p, r in rows.items()}
        over = {p: int(r.get("overshoot_by_site", {}).get(name, 0)) for p, r in rows.items()}
        delta = shares[ours] - shares[ref]
        departure = None
        if abs(delta) > tolerance + _noise(shares[ref], rows[ref]["requests"]):
            if queued_past_full:
                departure = SEED_OVERSHOOTS
            elif delta < 0 and several and over[ours] == 0:
                departure = FAIR_SHARE
            elif delta > 0 and several and over[ours] <= over[ref]:
                departure = SHARE_RANKED
            else:
                departure = UNEXPLAINED
        diffs.append(SiteDiff(name, shares, over, delta, departure))
    # A site that takes more because another gave up load on purpose is explained too.
    if any(d.departure in (SEED_OVERSHOOTS, FAIR_SHARE, SHARE_RANKED) for d in diffs):
        diffs = [
            SiteDiff(d.site, d.shares, d.overshoot, d.delta, KNOCK_ON)
            if d.departure == UNEXPLAINED and d.delta > 0 and d.overshoot[ours] == 0
            else d
            for d in diffs
        ]
    return Comparison(clients, rows, diffs)


def _noise(share: float, requests: int) -> float:
    """Three standard errors of a share drawn `requests` times: what the reference's own
    independent draws leave (a 36-request run of two equal sites splits 58/42)."""
    if requests <= 0:
        return 1.0
    return 3.0 * math.sqrt(max(share * (1.0 - share), 0.25 / requests) / requests)


def world(
    rng: Random,
    external: tuple[float, float] = (0.0, 1.2),
    gateways: tuple[int, int] = (1, 8),
    broken: bool = True,
    load: tuple[float, float] = (0.1, 1.5),
    max_clients: int = 240,
    duration_s: float = 12.0,
) -> dict[str, Any]:
    """A generated world as a scenario mapping: 2-8 sites of 1-256 slots, outside load of
    `external` (fractions of each site's slots), 1-8 gateways holding 0-100 % of an
    equal part of the clients, with `broken`, a scrape that fails for part of the run.
    Clients are `load` times the slots left free of outside load (at most
    `max_clients`, so a test run stays short)."""
    n = rng.randint(2, 8)
    sites = []
    free = 0
    for i in range(n):
        slots = rng.randint(1, 256)
        ext = round(slots * rng.uniform(*external))
        free += max(slots - ext, 0)
        site: dict[str, Any] = {"name": f"s{i}", "slots": slots}
        if ext:
            site["external"] = {"in_flight": ext}
        sites.append(site)
    g = rng.randint(*gateways)
    parts = [rng.uniform(0.05, 1.0) for _ in range(g)]  # positive, as the scenario asks
    parts = [round(p / sum(parts), 6) for p in parts]
    parts[-1] = round(1.0 - sum(parts[:-1]), 6)
    clients = max(1, min(max_clients, round(free * rng.uniform(*load))))
    events = []
    if broken and rng.random() < 0.4:
        down = rng.randrange(n)
        start = rng.uniform(2.0, duration_s / 2)
        events.append(
            {"metrics_down": f"s{down}", "at_s": round(start, 1), "until_s": round(start + 4, 1)}
        )
    return {
        "name": "generated",
        "seed": rng.randint(1, 10**6),
        "duration_s": duration_s,
        "warmup_s": 3.0,
        "clients": [clients],
        "sites": sites,
        "gateways": parts if g > 1 else 1,
        "events": events,
        "policies": ["saturation", "gridroute"],
    }
