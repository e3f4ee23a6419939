"""Two policies on the same request stream: where they differ, by how much, and why.

`gridroute sim compare SCENARIO --policies gridroute,saturation` runs every client
count of a scenario under each policy with the same seed (the same clients, service
times and worlds) and reports, per site, each policy's share of the completed
requests, its overshoot there, and the difference from the first policy that is not
`gridroute` (the reference, normally the seed rule `saturation`). A difference over
`tolerance` (beyond three standard errors of the reference's share, the noise of its
independent draws) is named by the rule that explains it where one does (`departure`):

* `seed_overshoots`: gridroute sent less to a site the reference overshot more; or, in
  either direction, the reference's goodput fell past the tolerance behind gridroute's
  with at least gridroute's overshoot in all (its requests queued behind load it could
  not move, and the shares of what completed follow those queues), unless gridroute
  took more at a site mostly held from outside than the seed's own rule gives it at
  gridroute's loads (`_fullest`);
* `fair_share` (several gateways, gridroute sent less, no overshoot of its own there,
  and no site mostly held from outside that it sent more to left fuller than this one,
  `_toward_fuller`, unless under capacity the site's free slots are under one slot of
  every gateway's part and gridroute left it unused, `_floored`): each gateway keeps
  to its part of the site's free room;
* `share_ranked` (several gateways, gridroute sent more, the site at most 60 % held from
  outside, or past that, where no other rule names the gain, left the fullest with room
  as it is, with no more than the pairs it wins as the gateways' ranking reads it,
  `_ranked_last`): it ranks what
  other gateways hold at a site at its share (their part is a poll old; ranked whole,
  gateways herd), so a small site with room wins more picks;
* `knock_on` (gridroute sent more, no overshoot there, the site at most 60 % held from
  outside): another site's departure above gave up load; also, however much outside
  load holds the site, where it is one of exactly two sites with room and the other's
  named loss is the floors' (its free slots under one slot of every gateway's part, so
  the whole budgets leave it unused: `_floored_other`);
* `counted_load` (gridroute sent more, no overshoot there, while it sent less to a site
  more held from outside): gridroute ranks on counted load (its own requests now), the
  seed on a poll-old smoothed rho, so it moves picks toward the lower pressure sooner;
* `past_capacity` (more clients than slots free of outside load, the reference's goodput
  fell past the tolerance behind gridroute's): gridroute's share of the site is its part
  of the free slots, within the tolerance, and its requests queued no longer than the
  excess forces plus the tolerance's part of the free slots left idle
  (`_past_capacity_queue`; nothing shed, failed or held, no change in clients); the
  excess queues under either policy, so overshoot there is forced, and the reference's
  shares follow the requests it queued for good behind outside load;
* `two_site_weighted` (exactly two sites with slots free of outside load, under capacity,
  gridroute sent more, overshooting it no more than the reference (the branch before
  reads more as `unexplained`; world 1499: 2 to the seed's 111), and the reference
  overshot it (or overshot it in the warm-up and still read it at rho 1 or more in the
  span), or,
  while the site's scrape failed for part of the run, left it more than the tolerance
  under its own two-site share at its own load): the reference read the site full or
  queued after its own overshoot (the worst poll-old sample of its lookback), or had no
  rho for it while its scrape failed, and dropped it below the other; gridroute's share
  is at most the two-site rule's (capacity / (1 + rho), 10-90 %) at gridroute's own load
  there, plus the tolerance; and the other site's loss of the same points, where
  gridroute overshot it no more than the reference (with one gateway nothing else names
  it);
* `seed_pairs` (three or more sites with slots free of outside load, under capacity,
  the reference overshot a site more than gridroute did): the power of two choices at
  gridroute's own loads (capacity-weighted pairs, each won by its emptier site; sites
  within the noise of each other grouped, either may win) gives every group of sites
  with room the share gridroute gave it, within the tolerance (`_pair_groups`), or
  gridroute's share of each group lies between that and the reference's, leaning to
  the emptier groups (`_drawn_or_toward_seed`: the seed's overshot sites held out of
  its tier part of the time); then a site that gained, which gridroute did not
  overshoot and which the reference overshot or whose pairs its overshoot dropped
  (`_dropped_pairs`), and the sites that gave up those points (overshot by gridroute
  no more than by the reference) are named, unless the site's group is every site
  with room (the draw then says nothing). Never where a group is past both its draw
  and the reference's share, or the shares lean to the fuller groups: a ranking that
  misreads one site past its draw leaves gridroute's loads other than the pair
  draw's;
* `counted_load` also covers a gain that the sites more held from outside gave up
  together (each within the tolerance): picks moved toward less outside load; and,
  under capacity, a gain that sites gave up together which the reference left at a
  pressure at least this site's at gridroute's shares and gridroute leaves at no lower
  one (pressure: outside load plus the share of the clients, over slots; each point
  given up counted once, none the reference overshot): picks moved toward the lower
  pressure, which is what the seed's pressure rule aims at, read on the load each
  policy left; and, under capacity, the loss such gains came from: a site gridroute
  sent less to (overshooting it no more) and leaves no emptier than any site it sends
  to past the pairs that site wins, whose points went to sites that gained (named
  `counted_load` or `share_ranked` by then, or within the tolerance) and that
  gridroute leaves no fuller than the reference left it (`_moved_to_lower`);
* `stream_noise` (a site no rule names on the scenario's own request stream): run again
  by both policies on `CONFIRM_STREAMS` more streams (seeds), gridroute overshot it no
  more over all of them together and the difference of their shares is within the
  tolerance at 95 % confidence (the mean difference plus t standard errors); a closed
  loop of few clients beside outside load moves a site's share (and where it
  overshoots) between streams by more than independent draws would (`_confirm`);
* `level` (read last, where no rule above names the difference; under capacity, three
  or more sites with room): gridroute's share of the site is within the tolerance of
  its level share (every site the clients use filled to one pressure, `level_shares`),
  the reference's is past the tolerance from it, and gridroute overshot the site no
  more over every stream it was run on; only where the seed's capacity-weighted pairs
  can give every site its level share and nothing in the scenario moves the level
  (`_level`). There every pair is a tie, so the level is where the seed's rule stops
  moving load, and a reference's share past the tolerance from it is the reference's
  own departure (`_at_level`);
* `unexplained`: anything else, and always where gridroute overshot a site more than
  the reference (over every stream it was run on; what the differential tests look
  for).

The same module makes the generated worlds of the differential harness (`world`), so
the tests, `bench/bench_differential.py` and a user's own scenarios are compared alike.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from itertools import combinations
from random import Random
from typing import Any

from gridroute.core.select import Policy, two_site_share
from gridroute.core.settings import AvailabilitySettings
from gridroute.core.view import others_weight
from gridroute.sim.engine import RunResult, SimRun, split
from gridroute.sim.scenario import ClientsEvent, MetricsDownEvent, Scenario, ScenarioSite

TOLERANCE = 0.05
"""Share points (as a fraction) past which two policies' shares of a site differ."""

SEED_OVERSHOOTS = "seed_overshoots"
FAIR_SHARE = "fair_share"
SHARE_RANKED = "share_ranked"
KNOCK_ON = "knock_on"
COUNTED_LOAD = "counted_load"
PAST_CAPACITY = "past_capacity"
TWO_SITE_WEIGHTED = "two_site_weighted"
SEED_PAIRS = "seed_pairs"
STREAM_NOISE = "stream_noise"
LEVEL = "level"
UNEXPLAINED = "unexplained"

CONFIRM_STREAMS = 7
"""More request streams (seeds `seed + 1` ... `seed + n`) both policies run where a site
reads `unexplained` on the scenario's own, before it stays so (`_confirm`)."""

SHARE_RANKED_OUTSIDE = 0.6
"""A site whose slots are held from outside past this fraction ranks by that load, whole:
gridroute taking more there than the seed is never `share_ranked` nor `knock_on`."""


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
    streams: tuple[float, ...] = ()
    """Where a difference was confirmed over more request streams (`_confirm`): its delta
    on each, the scenario's own first."""
    stream_overshoot: dict[str, int] = field(default_factory=dict)
    """There too: policy -> requests that found this site full over all those streams
    (one stream's count is as noisy as its shares)."""
    level: float | None = None
    """Where `level` names the difference: the site's level share (`level_shares`)."""

    @property
    def over_streams(self) -> tuple[float, float] | None:
        """(mean, standard error) of `streams`; None where it was not run on more."""
        return mean_error(self.streams) if len(self.streams) > 1 else None


def mean_error(xs: tuple[float, ...] | list[float]) -> tuple[float, float]:
    """The mean of two or more values and its standard error (their sample spread over
    the root of their number)."""
    n = len(xs)
    mean = sum(xs) / n
    return mean, math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1) / n)


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
        tiers = {p: r["tier_rule"] for p, r in self.rows.items() if "tier_rule" in r}
        return {
            "clients": self.clients,
            "requests": {p: r["requests"] for p, r in self.rows.items()},
            "overshoot": {p: r["overshoot"] for p, r in self.rows.items()},
            "queue_s": {p: r.get("queue_s") for p, r in self.rows.items()},
            "queued_s": {p: r.get("queued_s") for p, r in self.rows.items()},
            **({"tier_rule": tiers} if tiers else {}),
            "sites": [
                {
                    "site": d.site,
                    "shares": d.shares,
                    "overshoot": d.overshoot,
                    "delta": round(d.delta, 4),
                    "departure": d.departure,
                    "picks": {
                        p: r.get("picks_by_site", {}).get(d.site, {}) for p, r in self.rows.items()
                    },
                    **({"stream_deltas": [round(x, 4) for x in d.streams]} if d.streams else {}),
                    **({"stream_overshoot": d.stream_overshoot} if d.stream_overshoot else {}),
                    **({"level_share": d.level} if d.level is not None else {}),
                }
                for d in self.sites
            ],
        }


def compare(
    sc: Scenario,
    policies: list[Policy],
    tolerance: float = TOLERANCE,
    confirm: int = CONFIRM_STREAMS,
    audit: bool = False,
) -> list[Comparison]:
    """Every client count of `sc` under each of `policies` (same seed), compared; a site
    left `unexplained` is run again on `confirm` more streams (`_confirm`). `audit` reads
    gridroute's picks against the seed's tiers (its row's `tier_rule`, `sim/tier_audit`)."""
    out = []
    for clients in sc.client_counts:
        results = {p.value: SimRun(sc, p, clients, audit).run() for p in policies}
        c = _compare(sc, clients, results, policies, tolerance)
        confirmed = _confirm(sc, c, policies, tolerance, confirm)
        ranked = _ranked_last(sc, confirmed, policies, tolerance)
        out.append(_at_level(sc, ranked, policies, tolerance))
    return out


def _confirm(
    sc: Scenario, c: Comparison, policies: list[Policy], tolerance: float, streams: int
) -> Comparison:
    """A site that reads `unexplained` on the scenario's own request stream is run again
    by both policies on `streams` more (seeds `seed + 1` ...). It is `stream_noise` where
    gridroute overshot it no more than the reference over all of them together (the
    scenario's own included: one stream's overshoot count is as noisy as its shares;
    world 233's s5, 5 against 0 on its own stream, 23 against 423 over 8), and the difference
    between their shares is shown within the tolerance at 95 % one-sided confidence:
    the mean of the per-stream differences plus `T95` standard errors (their spread
    over the root of their number) is at most the tolerance, and so is the mean less
    them (an equivalence test, two one-sided tests).

    Why: the rules' noise (`_noise`) is that of independent draws, but a closed loop of
    few clients beside outside load is not: which sites its requests queue at, and so
    the shares, wander between streams by more than that (world 146's s1: the seed
    rule's share 10-22 % over 8 streams, gridroute's 13-17 %, the difference +7.5
    points on the world's own stream and -0.7 on average). One stream's difference
    there says little about the policies; the mean over several, with its error, does.
    The test is strict on purpose: where the reference's share swings between streams,
    the mean difference is imprecise and the site stays `unexplained` even where a
    defect happens to leave the mean small (with the external-ranking fix undone,
    world 209's s1 moves gridroute's share from 36 to 41 % over 8 streams, the mean
    difference +0.9 points, but its standard error of 2.4 leaves it `unexplained`:
    0.9 + 1.9 x 2.4 = 5.5)."""
    ours, ref = sides([p.value for p in policies])
    suspects = [d for d in c.sites if d.departure == UNEXPLAINED]
    if not suspects or streams <= 0:
        return c
    deltas: dict[str, list[float]] = {d.site: [d.delta] for d in suspects}
    over = {d.site: {ours: d.overshoot[ours], ref: d.overshoot[ref]} for d in suspects}
    for k in range(1, streams + 1):
        alt = sc.model_copy(update={"seed": sc.seed + k})
        rows: dict[str, dict[str, Any]] = {
            p.value: SimRun(alt, p, c.clients).run().row for p in policies if p.value in (ours, ref)
        }
        mine, theirs = rows[ours]["shares"], rows[ref]["shares"]
        for d in suspects:
            deltas[d.site].append(float(mine[d.site]) - float(theirs[d.site]))
            for p in (ours, ref):
                over[d.site][p] += int(rows[p].get("overshoot_by_site", {}).get(d.site, 0))
    out = []
    for d in c.sites:
        seen = deltas.get(d.site)
        if seen is not None:
            mean, error = mean_error(seen)
            equivalent = abs(mean) + _t95(len(seen) - 1) * error <= tolerance
            calm = over[d.site][ours] <= over[d.site][ref]
            departure = STREAM_NOISE if equivalent and calm else UNEXPLAINED
            d = SiteDiff(
                d.site, d.shares, d.overshoot, d.delta, departure, tuple(seen), over[d.site]
            )
        out.append(d)
    return Comparison(c.clients, c.rows, out)


T95 = (
    6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
    1.796, 1.782, 1.771, 1.761, 1.753, 1.746, 1.740, 1.734, 1.729, 1.725,
    1.721, 1.717, 1.714, 1.711, 1.708, 1.706, 1.703, 1.701, 1.699, 1.697,
)  # fmt: skip
"""Student's t at 95 % one-sided for 1-30 degrees of freedom (more: the value at 30,
above the normal's 1.645, so never less strict)."""


def _t95(df: int) -> float:
    return T95[min(max(df, 1), len(T95)) - 1]


def sides(names: list[str]) -> tuple[str, str]:
    """(gridroute's, the reference's) among policy `names`: gridroute where it runs, else
    the first; the reference the first other (the report's columns read the same)."""
    ours = Policy.GRIDROUTE.value if Policy.GRIDROUTE.value in names else names[0]
    ref = next((p for p in names if p != ours), ours)
    return ours, ref


def _compare(
    sc: Scenario,
    clients: int,
    results: dict[str, RunResult],
    policies: list[Policy],
    tolerance: float,
) -> Comparison:
    rows = {p: r.row for p, r in results.items()}
    ours, ref = sides([p.value for p in policies])
    several = len(sc.gateway_shares) > 1
    # The reference's goodput fell behind (its requests queued behind load it could not
    # move): the completed requests' shares follow those queues everywhere.
    collapsed = rows[ref]["requests"] < (1.0 - tolerance) * rows[ours]["requests"]
    room = _room(sc)
    gained = _held_gains(sc, rows, ours, ref)
    diffs = []
    for spec in sc.sites:
        name = spec.name
        shares = {p: float(r["shares"][name]) for p, r in rows.items()}
        over = {p: int(r.get("overshoot_by_site", {}).get(name, 0)) for p, r in rows.items()}
        # The reference overshot the site in the measured span, or in the warm-up and
        # then read it at rho 1 or more in the span (its rho, smoothed over that and
        # the worst of its lookback, stayed there: world 400); an overshoot in the
        # warm-up that the reference's reading got over does not count (world 7 s2).
        ref_over = over[ref] > 0 or _read_full_after_warmup(rows[ref], name)
        delta = shares[ours] - shares[ref]
        departure = None
        if abs(delta) > tolerance + _noise(shares[ref], rows[ref]["requests"]):
            if (
                collapsed
                and rows[ours]["overshoot"] <= rows[ref]["overshoot"]
                and (
                    delta < 0
                    or not _fullest(sc, room, name, shares[ours], clients, rows[ours], tolerance)
                )
            ):
                departure = SEED_OVERSHOOTS  # shares of a run that queued past full
            elif over[ours] > over[ref]:
                departure = UNEXPLAINED  # gridroute overshot more there: never on purpose
            elif delta < 0 and (over[ref] > over[ours] or collapsed):
                departure = SEED_OVERSHOOTS
            elif (
                delta < 0
                and several
                and over[ours] == 0
                and (
                    not _toward_fuller(sc, name, shares[ours], gained, rows[ours], clients)
                    or _floored(sc, name, shares[ours], clients)
                )
            ):
                departure = FAIR_SHARE
            elif delta > 0 and several and _outside(sc, name) <= SHARE_RANKED_OUTSIDE:
                departure = SHARE_RANKED
            elif (
                delta > 0
                and name in room
                and (
                    ref_over
                    # or its scrape failed for part of the run and the seed, with no rho
                    # for it then, left it far under its own two-site share
                    or (
                        _scrape_failed(sc, name)
                        and shares[ref]
                        < _two_site_share(sc, name, shares[ref], clients) - tolerance
                    )
                )
                and clients <= _free_total(sc)
                and len(room) == 2
                and shares[ours] <= _two_site_share(sc, name, shares[ours], clients) + tolerance
            ):
                # The seed overshot the site and then read it full or queued (reported
                # rho, worst over the lookback), dropping it below the other site;
                # gridroute kept it in the tier and gave it the two-site rule's share,
                # overshooting it no more than the seed (the branch above).
                departure = TWO_SITE_WEIGHTED
            else:
                departure = UNEXPLAINED
        diffs.append(SiteDiff(name, shares, over, delta, departure))
    # A site that takes more because another gave up load on purpose is explained too,
    # unless it is mostly held from outside (where taking more is the defect to find).
    if any(d.departure in (SEED_OVERSHOOTS, FAIR_SHARE) for d in diffs) or collapsed:
        diffs = [
            SiteDiff(d.site, d.shares, d.overshoot, d.delta, KNOCK_ON)
            if d.departure == UNEXPLAINED
            and d.delta > 0
            and d.overshoot[ours] == 0
            and _outside(sc, d.site) <= SHARE_RANKED_OUTSIDE
            else d
            for d in diffs
        ]
    # Past capacity (more clients than slots free of outside load, no hold, no
    # shedding) the excess queues under either policy, so overshoot is forced; where
    # the seed's goodput collapsed (its requests queued for good behind outside load)
    # and gridroute's share is the site's part of the free slots (what a router that
    # loses no slot serves there), the difference is the seed's.
    # Only while the time gridroute's requests spent queued is what the excess forces
    # (review: a defect that over-admits while keeping shares proportional would be
    # named otherwise: a slot it leaves idle is one more client queued, by Little's law).
    if (
        collapsed
        and clients > _free_total(sc)
        and _closed_loop(sc, rows[ours])
        and rows[ours].get("queued_s", math.inf) <= _past_capacity_queue(sc, clients, tolerance)
    ):
        diffs = [
            SiteDiff(d.site, d.shares, d.overshoot, d.delta, PAST_CAPACITY)
            if d.departure == UNEXPLAINED
            and abs(d.shares[ours] - _free(sc, d.site) / _free_total(sc))
            <= tolerance + _noise(d.shares[ours], rows[ours]["requests"])
            else d
            for d in diffs
        ]
    diffs = _two_site_mirror(room, diffs, ours, ref, tolerance)
    diffs = _floored_other(sc, room, diffs, ours, clients, tolerance)
    if clients <= _free_total(sc) and len(room) >= 3:
        diffs = _seed_pairs(sc, room, diffs, rows, ours, ref, clients, tolerance)
    # gridroute ranks on counted load (its own requests now), the seed on a poll-old
    # smoothed rho: moving picks from a site more held from outside to one less held,
    # with no overshoot there, is the pressure rule read on fresher load.
    given_up = [d for d in diffs if d.departure is not None and d.delta < 0]
    # What each site gave up that a gain may be read against (each share point once).
    pool = {d.site: -d.delta for d in diffs if d.delta < 0 and d.departure != SEED_OVERSHOOTS}
    out = []
    for d in diffs:
        if (
            d.departure == UNEXPLAINED
            and d.delta > 0
            and d.overshoot[ours] == 0
            and (
                any(_outside(sc, g.site) > _outside(sc, d.site) for g in given_up)
                # or the sites more held from outside gave up, together, all it took
                or _given_by_fuller(sc, diffs, d.site)
                >= d.delta - _noise(d.shares[ref], rows[ref]["requests"])
                # or, under capacity, sites that the seed left at a higher pressure than
                # gridroute leaves this one, and that gridroute leaves at no lower one,
                # gave up, together, all it took
                or (
                    clients <= _free_total(sc)
                    and _take_pressed(sc, diffs, d, ours, ref, clients, rows, pool)
                )
            )
        ):
            d = SiteDiff(d.site, d.shares, d.overshoot, d.delta, COUNTED_LOAD)
        out.append(d)
    if clients <= _free_total(sc):
        out = _moved_to_lower(sc, out, ours, ref, clients, rows, tolerance)
    return Comparison(clients, rows, out)


def _ranked_last(
    sc: Scenario, c: Comparison, policies: list[Policy], tolerance: float = TOLERANCE
) -> Comparison:
    """`share_ranked` past `SHARE_RANKED_OUTSIDE`, read after every other rule
    (`_confirm`'s `stream_noise` included) and only where none names the gain: several
    gateways, no more overshoot there than the reference's over the streams `_confirm`
    ran (more is never on purpose), and the site left the fullest of the sites with
    room gridroute uses as it is, taking no more than the pairs it wins as the sound
    ranking reads them (`_ranked_fullest`: the ranking's discount drew the picks). No
    rule reads this name, so naming it last changes no other site's verdict."""
    if len(sc.gateway_shares) <= 1:
        return c
    ours, ref = sides([p.value for p in policies])
    room = _room(sc)
    sites = []
    for d in c.sites:
        # over every stream `_confirm` ran where it ran (review: one stream is noisy)
        over = d.stream_overshoot or d.overshoot
        if (
            d.departure == UNEXPLAINED
            and d.delta > 0
            and over[ours] <= over[ref]
            and _ranked_fullest(sc, room, d.site, c.rows[ours], c.clients, tolerance)
        ):
            d = replace(d, departure=SHARE_RANKED)
        sites.append(d)
    return Comparison(c.clients, c.rows, sites)


def _at_level(
    sc: Scenario, c: Comparison, policies: list[Policy], tolerance: float = TOLERANCE
) -> Comparison:
    """`level`, read after every other rule and only where none names the difference:
    under capacity, with three or more sites with room, gridroute's share of the site is
    within the tolerance of its level share (`level_shares`: the clients spread so that
    every site they use ends at one pressure), the reference's is past the tolerance
    from it, and gridroute overshot the site no more than the reference over every
    stream `_confirm` ran; only where the seed's pairs can reach the level and nothing
    in the scenario moves it (`_level`).

    Why: with three or more sites the seed's rule sends each request to the emptier of
    a capacity-weighted pair, so where its pairs can give every site its level share
    (`_reachable`) the level is where it stops moving load: every pair is a tie there.
    A seed's run that overshot sites and then held them out of its tier (its reading
    of them lags), or that collapsed behind queues, lands away from it, and a share of
    gridroute's at the level is then not worse than the seed's but nearer what its rule
    would give (worlds 602, 1080). Where the pairs cannot reach the level (a site whose
    pairs are fewer than its level share, or two sites past the level that are drawn
    together and one of which must win) the seed's rule settles elsewhere and this rule
    reads nothing (review: three sites 40, 60 and 90 % held, 30 clients, whose level
    gives the emptiest 83 % where its pairs give it at most 67 %). A share past the
    tolerance from the level is never named here, so a ranking that misreads a site and
    moves it past the tolerance from the level is still found; two sites with room are
    left to the seed's two-site formula, which does not aim at one pressure
    (`two_site_weighted`). No rule reads this name, so naming it last changes no other
    site's verdict."""
    room = _room(sc)
    if len(room) < 3 or c.clients > _free_total(sc):
        return c
    level = _level(sc, room, c.clients)
    if level is None:
        return c
    ours, ref = sides([p.value for p in policies])
    sites = []
    for d in c.sites:
        over = d.stream_overshoot or d.overshoot
        if (
            d.departure == UNEXPLAINED
            and d.site in level
            and over[ours] <= over[ref]
            and abs(d.shares[ours] - level[d.site]) <= tolerance
            and abs(d.shares[ref] - level[d.site]) > tolerance
        ):
            d = replace(d, departure=LEVEL, level=round(level[d.site], 4))
        sites.append(d)
    return Comparison(c.clients, c.rows, sites)


def _level(sc: Scenario, room: list[str], clients: int) -> dict[str, float] | None:
    """The level shares of the sites with room (`level_shares`), or None where the level
    is not where the seed's rule settles: its pairs cannot reach it (`_reachable`), or
    something in the scenario moves it. Moving it: a partition, a failed site, an
    operator restart, a change in clients, outside load that changes in the measured
    span, a site with room whose scrape fails long enough that it may be judged silent
    (the failure, a scrape interval before it and one after, and a poll, past the
    freshness window: its newest sample may be that old), sites that serve at
    different speeds (the level is of requests in flight, the shares of requests
    completed), or an overlay or sessions (which choose within groups or by cache)."""
    if sc.overlay is not None or sc.sessions is not None:
        return None
    if len({(s.service_scale, s.service) for s in sc.sites}) > 1:
        return None
    window = sc.availability.freshness_window_ms / 1000.0
    poll = sc.gateway_poll_interval_s or sc.poll_interval_s
    for e in sc.events:
        if not isinstance(e, MetricsDownEvent):
            return None
        age = e.until_s - e.at_s + 2 * sc.scrape_interval_s + poll
        if e.metrics_down in room and age > window:
            return None
    for spec in sc.sites:
        ext = spec.external
        if ext is not None:
            seen = {ext.level(sc.warmup_s)} | {
                v for at, v in ext.changes(sc.duration_s) if at > sc.warmup_s
            }
            if len(seen) > 1:
                return None
    level = level_shares(sc, room, clients)
    return level if _reachable(sc, room, level) else None


def _reachable(sc: Scenario, room: list[str], level: dict[str, float]) -> bool:
    """Whether the seed's pairs can give every site with room its `level` share: every
    set of them takes at most the chance that a pair drawn by capacity (`_draw_weights`)
    holds one of its sites (a request goes to a site of its pair), so the sites the
    level leaves empty must never be drawn together (one of them would win)."""
    weight = _draw_weights(sc, room)
    for k in range(1, len(room)):
        for chosen in combinations(room, k):
            apart = _group_draw(weight, [n for n in room if n not in chosen], [])
            if sum(level[n] for n in chosen) > 1.0 - apart + 1e-9:
                return False
    return True


def level_shares(sc: Scenario, room: list[str], clients: int) -> dict[str, float]:
    """Each site's share of `clients` in flight where they fill the sites in `room` to
    one pressure (outside load plus their part, over the slots: `_pressure`), the
    emptiest first, as water fills basins: the sites already past that pressure from
    outside take none."""
    if clients <= 0:
        return {name: 0.0 for name in room}
    specs = sorted((_site(sc, name) for name in room), key=lambda s: _outside(sc, s.name))
    used: list[ScenarioSite] = []
    level = 0.0
    for spec in specs:
        if used and _outside(sc, spec.name) >= level:
            break
        used.append(spec)
        level = (clients + sum(_held(sc, s) for s in used)) / sum(s.slots for s in used)
    parts = {s.name: max(level * s.slots - _held(sc, s), 0.0) for s in used}
    return {name: parts.get(name, 0.0) / clients for name in room}


def _held_gains(sc: Scenario, rows: dict[str, dict[str, Any]], ours: str, ref: str) -> list[str]:
    """The sites gridroute sent more to than the reference, beyond the noise of the
    reference's share there, that are held from outside past `SHARE_RANKED_OUTSIDE`
    (where the share ranking excuses no gain): what `_toward_fuller` reads."""
    out = []
    for spec in sc.sites:
        theirs = float(rows[ref]["shares"][spec.name])
        gain = float(rows[ours]["shares"][spec.name]) - theirs
        if gain > _noise(theirs, rows[ref]["requests"]) and (
            _outside(sc, spec.name) > SHARE_RANKED_OUTSIDE
        ):
            out.append(spec.name)
    return out


def _toward_fuller(
    sc: Scenario, site: str, share: float, gained: list[str], row: dict[str, Any], clients: int
) -> bool:
    """Whether gridroute moved load from `site` (where it sent `share`) toward a fuller
    site mostly held from outside: one of `gained` (`_held_gains`) is left by gridroute
    at a higher pressure than this one, beyond the noise of both. Such a loss is never
    `fair_share`: budgets that hold gateways back at a site send their requests to the
    sites with room, not to a fuller one; a ranking that reads outside load as less
    than it is does.

    Why: with the external-ranking fix undone, world 519 (5 gateways, 45 clients)
    moved 9 points from s1 (56 % held, 103 free slots, left at 0.721, the emptiest
    site with room) to s0 and s3 (77 % held, left at 0.83), each gain within the
    tolerance; s1's loss read `fair_share` and the world read clean."""
    requests = row["requests"]
    mine = _pressure(sc, site, share, clients)
    noise = _pressure_noise(sc, site, share, requests, clients)
    for g in gained:
        theirs = float(row["shares"][g])
        margin = math.hypot(noise, _pressure_noise(sc, g, theirs, requests, clients))
        if _pressure(sc, g, theirs, clients) > mine + margin:
            return True
    return False


def _moved_to_lower(
    sc: Scenario,
    diffs: list[SiteDiff],
    ours: str,
    ref: str,
    clients: int,
    rows: dict[str, dict[str, Any]],
    tolerance: float,
) -> list[SiteDiff]:
    """The loss side of `counted_load`, under capacity: a site gridroute sent less to,
    overshooting it no more than the reference, that gridroute leaves no emptier than
    any site it sends requests to (within the noise of its share) past the pairs that
    site wins (a fuller site still wins the pairs drawn without an emptier one:
    `_pair_groups`; read only with three or more sites with room, where the fuller
    site's group is not every one of them and does not hold the losing site: review),
    whose points went to sites that gained (no overshoot of gridroute's there; named
    `counted_load`, or `share_ranked` as `_compare` names it, at most 60 % held, or
    within the tolerance), each left by gridroute at a pressure no higher than the
    reference left this site at. Picks moved from where the seed's poll-old reading left
    more load toward the lower pressure, and no further than level: the seed's pressure
    rule read on counted load. Those takers' gains, each point counted once, must cover
    the loss (less its noise); losses are read fullest first, so the order of the sites
    does not matter. World 1069 (four gateways): the seed left s3 at 0.627 beside s0 and s4 at
    0.594 and 0.585; gridroute levels the three at 0.604-0.607, s4's gain named
    `share_ranked`, s0's within the tolerance, and two sites 75 % held take 3.7 % and
    1.3 %, within the 5.6 % their one pair gives them.

    Why: where one gateway ranks on its own counted requests, the seed on a smoothed
    rho a poll old (or on none while a scrape fails), the seed leaves some site fuller
    than the rest and gridroute levels it (world 518: the seed left s4 at pressure
    0.865 and s2 at 0.743, gridroute leaves s1, s2 and s4 at 0.80; 530 and 596 alike).
    The gain was named; the loss it came from was not. A ranking that reads some site
    emptier than it is leaves that site fuller than the sites it took from, and taking
    more than the pairs it wins, whether it gained past the tolerance or not, so no loss
    beside it is named (review: a ranking of other load at 0.6 of it in world 545 sent
    90 %-held s2 13.9 %, within the tolerance of the seed's share and the fullest site
    at 0.928, while s1's loss was paid from s0's gain: the fullest-site condition keeps
    s1 `unexplained`)."""
    requests = rows[ours]["requests"]
    pool = {
        d.site: d.delta
        for d in diffs
        if d.departure in (COUNTED_LOAD, SHARE_RANKED, None)
        and d.delta > 0
        and d.overshoot[ours] == 0
    }
    if not pool:
        return diffs
    pressure = {d.site: _pressure(sc, d.site, d.shares[ours], clients) for d in diffs}
    shares = {d.site: d.shares[ours] for d in diffs}
    used = [d.site for d in diffs if d.shares[ours] > 0.0]
    room = _room(sc)
    # The groups whose share is within their pairs: with three or more sites with room
    # (two draw by the seed's two-site formula) and a group not every one of them (its
    # draw is then everything: review).
    groups = _pair_groups(sc, room, rows[ours], clients) if len(room) >= 3 else []
    within = [
        set(g)
        for g, drawn in groups
        if len(g) < len(room) and sum(shares[m] for m in g) <= drawn + tolerance
    ]
    named = set()
    for d in sorted(diffs, key=lambda d: -pressure[d.site]):
        if d.departure != UNEXPLAINED or d.delta >= 0 or d.overshoot[ours] > d.overshoot[ref]:
            continue
        level = pressure[d.site] + _pressure_noise(sc, d.site, d.shares[ours], requests, clients)
        if any(
            pressure[u] > level and not any(u in g and d.site not in g for g in within)
            for u in used
        ):
            continue
        seed = _pressure(sc, d.site, d.shares[ref], clients)
        takers = [t for t in pool if pressure[t] <= min(seed, level)]
        if _spend(pool, takers, -d.delta - _noise(d.shares[ref], rows[ref]["requests"])):
            named.add(d.site)
    return [
        SiteDiff(d.site, d.shares, d.overshoot, d.delta, COUNTED_LOAD) if d.site in named else d
        for d in diffs
    ]


def _spend(pool: dict[str, float], sites: list[str], need: float) -> bool:
    """Whether `sites`' points in `pool` cover `need`; if so they are taken from it (each
    share point explains one difference only)."""
    if sum(pool[n] for n in sites) < need:
        return False
    for n in sites:
        taken = min(pool[n], max(need, 0.0))
        pool[n] -= taken
        need -= taken
    return True


def _two_site_mirror(
    room: list[str],
    diffs: list[SiteDiff],
    ours: str,
    ref: str,
    tolerance: float,
) -> list[SiteDiff]:
    """With exactly two sites with room, what one gains under `two_site_weighted` the
    other gives up: that loss is the same departure, where gridroute overshot it no
    more than the reference and the loss is the gain, within the tolerance. (With one
    gateway nothing else names it; with several and no overshoot of gridroute's there
    it reads `fair_share` already.)"""
    if len(room) != 2:
        return diffs
    gains = {d.site: d.delta for d in diffs if d.departure == TWO_SITE_WEIGHTED}
    out = []
    for d in diffs:
        other = _other(room, d.site)
        if (
            d.departure == UNEXPLAINED
            and d.site in room
            and d.delta < 0
            and other in gains
            and d.overshoot[ours] <= d.overshoot[ref]
            and abs(gains[other] + d.delta) <= tolerance
        ):
            d = SiteDiff(d.site, d.shares, d.overshoot, d.delta, TWO_SITE_WEIGHTED)
        out.append(d)
    return out


def _other(room: list[str], site: str) -> str | None:
    """Of exactly two sites with room, the one that is not `site` (None where `site` is
    the only one listed)."""
    return next((r for r in room if r != site), None)


def _floored(sc: Scenario, site: str, share: float, clients: int) -> bool:
    """Whether the budgets' floors explain why gridroute left `site` unused (`share` of
    `clients` under one request in flight there on average): fair share is on, the
    world is under capacity (so another site has room), and the site's free slots give
    every gateway less than one whole slot of its part. A gateway's part is its share of
    the gateways' in-flight: its whole clients over all of them (as the run splits them,
    `engine.split`; the nominal split understates it by up to one client), and at least
    `fair_share_floor`. A fraction is taken only where no site of the tier has whole
    room (`GridState._whole`: a fraction granted is one every gateway sharing the site
    may take at once), so such a site is floored to none while another has room.

    The condition reads the world (slots, held load, the clients each gateway holds),
    and the floors are budgets, which no ranking moves: a ranking that misreads outside
    load is not hidden by it, even where the loss went to a fuller site (world 2048: 6
    gateways, 4 clients; s0's 3 free slots are 0.75 of a slot for each gateway with a
    client, so every request went to s1, 90 % held, where the seed sent s0 23 %). Found
    by review: on the nominal split, world 2048 at 2 clients (0.5 of the clients at
    each of two gateways, 1.5 slots each) or world 497 (3 clients over 8 gateways)
    read floored, and a defect that left the site unused there was named."""
    a = sc.availability
    if not a.fair_share or clients <= 0:
        return False
    busiest = max(split(clients, sc.gateway_shares)) / clients
    return (
        clients <= _free_total(sc)
        and share * clients < 1.0
        and max(busiest, a.fair_share_floor) * _free(sc, site) < 1.0
    )


def _floored_other(
    sc: Scenario,
    room: list[str],
    diffs: list[SiteDiff],
    ours: str,
    clients: int,
    tolerance: float,
) -> list[SiteDiff]:
    """With exactly two sites with room, a gain at one (no overshoot of gridroute's
    there) that the other's loss, already named (`seed_overshoots` or `fair_share`),
    gave up within the tolerance, where the floors explain that loss (`_floored`: under
    capacity, fair share on, the other site's free slots under one whole slot of every
    gateway's part): each gateway's budget there is floored to none while this site
    has room, so gridroute leaves it unused (less than one of its requests there on
    average) and this site takes all. `knock_on`, however much of this site outside
    load holds: there is nowhere else.

    Why: world 629 (6 gateways, 10 clients): s0's 3 free slots are 0.3-0.6 of a slot
    per gateway (1-2 clients each), so gridroute sent every request to s1 (61 % held),
    where the seed sent 82 % and overshot s0 8 times. The condition reads the world
    (slots, held load, the clients each gateway holds), and the floors are budgets,
    which no ranking moves: a ranking that misreads outside load is not hidden by it.
    (A bug that left such a site unused otherwise would read the same in the shares.)"""
    if len(room) != 2:
        return diffs
    by_site = {d.site: d for d in diffs}
    out = []
    for d in diffs:
        other = by_site.get(_other(room, d.site) or "")
        if (
            other is not None
            and d.site in room
            and d.departure == UNEXPLAINED
            and d.delta > 0
            and d.overshoot[ours] == 0
            and other.departure in (SEED_OVERSHOOTS, FAIR_SHARE)
            and _floored(sc, other.site, other.shares[ours], clients)
            and abs(d.delta + other.delta) <= tolerance
        ):
            d = SiteDiff(d.site, d.shares, d.overshoot, d.delta, KNOCK_ON)
        out.append(d)
    return out


def _seed_pairs(
    sc: Scenario,
    room: list[str],
    diffs: list[SiteDiff],
    rows: dict[str, dict[str, Any]],
    ours: str,
    ref: str,
    clients: int,
    tolerance: float,
) -> list[SiteDiff]:
    """Three or more sites with room, under capacity: the reference overshot a site (its
    requests queued there behind outside load, and a reading at rho 1 or more holds a
    site out of its tier), while gridroute, with no overshoot there, kept it in and gave
    every group of sites with room what the seed's own pair draw gives it at
    gridroute's loads (`_pair_groups`), or a share between that and the reference's:
    the seed's rule with the overshot sites held out of its tier for part of the run,
    as its reading holds them out for a while after each overshoot (worlds 253 and
    1390: the emptiest site's pairs 47.8 % and 71.9 % of the draw, gridroute 66.4 % and
    77.7 %, the seed, which overshot the two others, 83.8 % and 85.1 %). Then a site
    that gained, which the reference overshot or whose pairs its overshoot dropped
    (`_dropped_pairs`), and the sites that gave those points up (overshot by gridroute
    no more than by the reference) are named.

    Only where every group of sites is within the tolerance of that span, leaning to
    the emptier groups (`_drawn_or_toward_seed`), and the gaining site's group is not
    every site with room (all within the noise of each other, the draw says nothing
    about any one of them: with the external-ranking fix undone, world 63's s0 takes
    8.8 % where the seed gives 0.3 %, its 8 slots' noise spanning all three sites). A
    share past both the draw's and the reference's, or leaning to a fuller group, is a
    ranking that read a site emptier or fuller than it was (with the fix undone, world
    360's s0 takes 19 % where the draw gives it none, and its s2's gain stays
    `unexplained`)."""
    over_ref = {
        d.site
        for d in diffs
        if d.overshoot[ref] > d.overshoot[ours] or _read_full_after_warmup(rows[ref], d.site)
    }
    if not over_ref:
        return diffs
    shares = {d.site: d.shares[ours] for d in diffs}
    groups = _pair_groups(sc, room, rows[ours], clients)
    theirs = {d.site: d.shares[ref] for d in diffs}
    if not _drawn_or_toward_seed(groups, shares, theirs, tolerance):
        return diffs
    told = {n for g, _ in groups if len(g) < len(room) for n in g}
    dropped = _dropped_pairs(sc, room, groups, over_ref, theirs, rows[ours], clients, tolerance)
    gains = [
        d
        for d in diffs
        if d.departure == UNEXPLAINED
        and d.delta > 0
        and (d.site in over_ref or d.site in dropped)
        and d.site in told
        and d.overshoot[ours] == 0
    ]
    pool = sum(d.delta for d in gains)
    named = {d.site for d in gains}
    out = []
    for d in diffs:
        if (
            gains
            and d.departure == UNEXPLAINED
            and d.delta < 0
            and d.site in told
            and d.overshoot[ours] <= d.overshoot[ref]
            and pool >= -d.delta - tolerance
        ):
            pool += d.delta
            named.add(d.site)
        if d.site in named:
            d = SiteDiff(d.site, d.shares, d.overshoot, d.delta, SEED_PAIRS)
        out.append(d)
    return out


def _drawn_or_toward_seed(
    groups: list[tuple[list[str], float]],
    ours: dict[str, float],
    theirs: dict[str, float],
    tolerance: float,
) -> bool:
    """Whether gridroute's shares of the groups (`_pair_groups`, emptiest first) are
    the draw's, each within the tolerance, or each between the draw's and the
    reference's (within the tolerance) and leaning to the emptier groups: every run of
    the emptiest groups takes at least its draw, less the tolerance. The seed's own
    tiers lean that way (its overshot sites held out for a while, the emptier sites
    take their pairs: worlds 253 and 1390); a ranking that reads a fuller site emptier
    than it is gives that site more than its pairs, which leans the other way where it
    is in a fuller group (review: all load not a gateway's own ranked at 0.6 of it
    sends world 545's fullest site, 90 % held, 13.9 % where its pairs give it none and
    the seed 15.8 %, and the first version, between the two only, named the loss that
    paid for it). Not seen: a misreading that moves share between sites of one group,
    within the noise of each other, inside the group's span (world 253 with the same
    defect: s0 from 5.7 % to 9.5 %, left at 0.970 beside s1's 0.963; a strict xfail in
    tests/sim/test_seed_agreement.py)."""
    got = [sum(ours[n] for n in g) for g, _ in groups]
    if all(abs(x - drawn) <= tolerance for x, (_, drawn) in zip(got, groups, strict=True)):
        return True
    took = drew = 0.0
    for x, (g, drawn) in zip(got, groups, strict=True):
        sent = sum(theirs[n] for n in g)
        took += x
        drew += drawn
        if not min(drawn, sent) - tolerance <= x <= max(drawn, sent) + tolerance:
            return False
        if took < drew - tolerance:
            return False
    return True


def _dropped_pairs(
    sc: Scenario,
    room: list[str],
    groups: list[tuple[list[str], float]],
    over_ref: set[str],
    theirs: dict[str, float],
    row: dict[str, Any],
    clients: int,
    tolerance: float,
) -> set[str]:
    """The sites of every group the reference sent less than its draw gives it, past the
    tolerance, where its draw without the sites the reference overshot in that group or
    a fuller one (held out of the reference's tier by its reading after the overshoot)
    gives the group no more than the reference did, within the tolerance. Those sites
    lost the pairs they win (against their group or fuller sites) because the reference
    took the sites they beat out of its tier: world 1215's s6, whose group-mate s7 the
    seed overshot (the pair 22.8 % by the draw, 6.6 % by the seed, 0 without s7), and
    1221's s4, whose one fuller site s0 it overshot (10.1 %, 0.4 %, 0). Sites the
    reference overshot in emptier groups only take pairs from the group, so they are not
    removed; with fewer than three sites left the reference draws by its two-site
    formula, which this does not model, so nothing is named."""
    out: set[str] = set()
    for k, (group, drawn) in enumerate(groups):
        sent = sum(theirs[n] for n in group)
        if drawn - sent <= tolerance:
            continue
        gone = {n for g, _ in groups[k:] for n in g if n in over_ref}
        left = [n for n in room if n not in gone]
        if not gone or len(left) < 3:
            continue
        # The pairs the group's sites left still win, in the order and groups read at
        # gridroute's loads (grouping again without the removed sites could merge a
        # site of an emptier group into this one: review).
        mine = [n for n in group if n not in gone]
        fuller = [n for g, _ in groups[k + 1 :] for n in g if n not in gone]
        kept = _group_draw(_draw_weights(sc, left), mine, fuller)
        if kept <= sent + tolerance:
            out.update(group)
    return out


def _read_full_after_warmup(row: dict[str, Any], site: str) -> bool:
    """Whether the run overshot `site` in the warm-up and still read it at rho 1 or more
    in the measured span (its rho, smoothed over that overshoot and the worst of its
    lookback, stayed there: world 400)."""
    return (
        int(row.get("warmup_overshoot_by_site", {}).get(site, 0)) > 0
        and float(row.get("read_full_s_by_site", {}).get(site, 0.0)) > 0.0
    )


def _pair_groups(
    sc: Scenario, room: list[str], row: dict[str, Any], clients: int
) -> list[tuple[list[str], float]]:
    """The sites with room, grouped where their pressures at gridroute's shares
    (`_pressure`) are within the noise of each other (`_pressure_noise` of both, as the
    root of their squares, chained from the emptiest), each with the share of requests
    the seed's power of two choices gives the group at those pressures: the chance that
    a pair drawn by capacity (weighted as the plan weighs it, `explore_floor` of the
    largest site, room or not) has both sites in the group, or one there and the other
    in a fuller group. Within a group the noise decides which site wins, so only the
    group's total is the draw's."""
    weight = _draw_weights(sc, room)
    requests = int(row["requests"])
    load = {}
    for name in room:
        share = float(row["shares"][name])
        noise = _pressure_noise(sc, name, share, requests, clients)
        load[name] = (_pressure(sc, name, share, clients), noise)
    order = sorted(room, key=lambda n: load[n][0])
    groups: list[list[str]] = []
    for name in order:
        if groups:
            last = groups[-1][-1]
            gap = load[name][0] - load[last][0]
            if gap <= math.hypot(load[name][1], load[last][1]):
                groups[-1].append(name)
                continue
        groups.append([name])

    out = []
    for k, group in enumerate(groups):
        fuller = [n for g in groups[k + 1 :] for n in g]
        out.append((group, _group_draw(weight, group, fuller)))
    return out


def _draw_weights(sc: Scenario, room: list[str]) -> dict[str, float]:
    """The sites with room weighted as the plan weighs its capacity draw: slots, lifted
    to `explore_floor` of the largest site (room or not)."""
    floor = AvailabilitySettings().explore_floor * max(s.slots for s in sc.sites)
    return {name: max(_site(sc, name).slots, floor) for name in room}


def _group_draw(weight: dict[str, float], group: list[str], fuller: list[str]) -> float:
    """The share of requests the power of two choices gives `group`: the chance that a
    pair drawn by `weight` has both sites in it, or one there and the other in `fuller`
    (each pair won by its emptier site)."""
    inside = sum(_pair_chance(weight, a, b) for x, a in enumerate(group) for b in group[x + 1 :])
    return inside + sum(_pair_chance(weight, a, b) for a in group for b in fuller)


def _pair_chance(weight: dict[str, float], a: str, b: str) -> float:
    """The chance that two distinct draws by `weight` are `a` and `b`, in either order."""
    total = sum(weight.values())
    wa, wb = weight[a], weight[b]
    return wa / total * wb / (total - wa) + wb / total * wa / (total - wb)


def _fullest(
    sc: Scenario,
    room: list[str],
    site: str,
    share: float,
    clients: int,
    row: dict[str, Any],
    tolerance: float,
) -> bool:
    """Whether gridroute's `share` of a site mostly held from outside (past
    `SHARE_RANKED_OUTSIDE`) is more than the seed's own rule would give it at
    gridroute's loads. The seed's collapse does not explain such a gain: its shares
    follow its queues, but gridroute's should still follow the seed's rule.

    * Two sites with room: more than the two-site share (capacity / (1 + rho), 10-90 %)
      at gridroute's load there, plus the tolerance. That formula may leave the larger
      site the fuller one.
    * Three or more: the site ends fuller than every other site with room, beyond the
      noise of its share. The power of two choices sends a site requests only while it
      is the emptier of a pair, so a site left the fullest of all took them on a
      reading that called it emptier than it was (the external-ranking defect's mark:
      with it undone, worlds 96 s0 and 220 s1)."""
    if _outside(sc, site) <= SHARE_RANKED_OUTSIDE:
        return False
    if len(room) == 2 and site in room:
        return share > _two_site_share(sc, site, share, clients) + tolerance
    mine = _pressure(sc, site, share, clients)
    margin = _pressure_noise(sc, site, share, row["requests"], clients)
    others = [
        _pressure(sc, name, float(row["shares"][name]), clients) for name in room if name != site
    ]
    return bool(others) and mine > max(others) + margin


def _pick_pressure(sc: Scenario, site: str, share: float, clients: int) -> float:
    """`_pressure` as gridroute's picks read it (`SiteView.pick_rho`), averaged over the
    gateways by their part of the clients: each ranks its own requests there and the
    outside load whole, and the other gateways' part at its share, nearer whole as
    outside load holds more of the site (`view.others_weight`, the ramp of the sound
    policy: a ranking that misreads the site reads otherwise). Each gateway's part of
    gridroute's load there is taken as its part of the clients."""
    spec = _site(sc, site)
    held = _held(sc, spec)
    ours = share * clients
    read = 0.0
    for part in sc.gateway_shares:
        weight = others_weight(part, held / spec.slots)
        read += part * (held + part * ours + weight * (1.0 - part) * ours)
    return read / spec.slots


def _ranked_fullest(
    sc: Scenario,
    room: list[str],
    site: str,
    row: dict[str, Any],
    clients: int,
    tolerance: float = TOLERANCE,
) -> bool:
    """Whether gridroute's loads leave `site` the fullest of the other sites with room
    it sends requests to as they are (`_pressure`), beyond the noise of the site's
    share, while its picks read it emptier than some of them (`_pick_pressure`, by that
    noise too), and its share is no more than the tolerance past the pairs with those
    (capacity-weighted, as the plan draws) that it then wins: the ranking's discount
    turned the order over, so its gain is the share ranking's, by design
    (docs/selection.md, `share_ranked`), also past `SHARE_RANKED_OUTSIDE`, where the
    ranking weighs other gateways' load only part of the way to whole. The power of two
    choices sends the fullest site requests only while it reads the emptier of a pair;
    a share past the pairs it reads itself winning was taken on some other reading, or
    for some other reason. The pairs, not merely "not the fullest as read" (review): a
    site gridroute barely uses, nearly full from outside, reads near its held fraction
    and would otherwise let any gain under it pass; it is one flipped pair's worth.
    (First written as "the emptiest as read": world 1157's s2 reads emptier than the
    four sites it wins against, but not than 56 % held s0, which the budgets keep at
    2.3 %; its 47.0 % is within those pairs' 48.6 %.)"""
    if site not in room:
        return False
    share = float(row["shares"][site])
    requests = row["requests"]
    margin = _pressure_noise(sc, site, share, requests, clients)
    used = [n for n in room if n != site and float(row["shares"][n]) > 0.0]
    if not used:
        return False
    shares = {n: float(row["shares"][n]) for n in used}
    as_is = max(_pressure(sc, n, shares[n], clients) for n in used)
    if _pressure(sc, site, share, clients) <= as_is + margin:
        return False
    read = _pick_pressure(sc, site, share, clients)
    # each pair read beyond the noise of both shares, as `_pair_groups` groups them
    flipped = [
        n
        for n in used
        if _pick_pressure(sc, n, shares[n], clients)
        > read + math.hypot(margin, _pressure_noise(sc, n, shares[n], requests, clients))
    ]
    weight = _draw_weights(sc, room)
    won = sum(_pair_chance(weight, site, n) for n in flipped)
    return bool(flipped) and share <= won + tolerance


def _held(sc: Scenario, spec: ScenarioSite) -> float:
    """What outside load holds at `spec`'s site, on average over the measured span (a
    constant level, steps or a trace alike; a stepped or traced site read at its level
    at 0 looked empty to every rule here)."""
    ext = spec.external
    if ext is None:
        return 0.0
    start, end = sc.warmup_s, sc.duration_s
    if end <= start:
        return float(ext.level(start))
    total = 0.0
    changes = ext.changes(end)
    for k, (at, level) in enumerate(changes):
        until = changes[k + 1][0] if k + 1 < len(changes) else end
        lo, hi = max(at, start), min(until, end)
        if hi > lo:
            total += level * (hi - lo)
    return total / (end - start)


def _site(sc: Scenario, site: str) -> ScenarioSite:
    return next(s for s in sc.sites if s.name == site)


def _outside(sc: Scenario, site: str) -> float:
    """The fraction of `site`'s slots held from outside (`_held`)."""
    spec = _site(sc, site)
    return _held(sc, spec) / spec.slots


def _given_by_fuller(sc: Scenario, diffs: list[SiteDiff], site: str) -> float:
    """The share points that sites more held from outside than `site` gave up."""
    held = _outside(sc, site)
    return -sum(g.delta for g in diffs if g.delta < 0 and _outside(sc, g.site) > held)


def _pressure(sc: Scenario, site: str, share: float, clients: int) -> float:
    """`site`'s load over its slots with `share` of the clients' requests there: outside
    load plus that part (under capacity nothing queues, so the clients' in-flight is
    the clients, split as the completed requests are)."""
    spec = _site(sc, site)
    return (_held(sc, spec) + share * clients) / spec.slots


def _take_pressed(
    sc: Scenario,
    diffs: list[SiteDiff],
    d: SiteDiff,
    ours: str,
    ref: str,
    clients: int,
    rows: dict[str, dict[str, Any]],
    pool: dict[str, float],
) -> bool:
    """Whether `d`'s gain is load moved toward the lower pressure, the seed's pressure
    rule's own aim, read on the load each policy left: sites whose pressure the
    reference left at least `d`'s at gridroute's shares, and where gridroute leaves no
    lower pressure than at `d` (within the noise of `d`'s share), gave up together what
    it took. What they gave up is taken from `pool`, so no loss explains two gains."""
    mine = _pressure(sc, d.site, d.shares[ours], clients)
    margin = _pressure_noise(sc, d.site, d.shares[ours], rows[ours]["requests"], clients)
    givers = [
        g.site
        for g in diffs
        if pool.get(g.site, 0.0) > 0.0
        and _pressure(sc, g.site, g.shares[ref], clients) >= mine
        and _pressure(sc, g.site, g.shares[ours], clients) + margin >= mine
    ]
    return _spend(pool, givers, d.delta - _noise(d.shares[ref], rows[ref]["requests"]))


def _pressure_noise(sc: Scenario, site: str, share: float, requests: int, clients: int) -> float:
    """`_noise` of a share of `requests`, as pressure at `site` (`_pressure`): what the
    share's own sampling noise moves the site's load over its slots by."""
    return _noise(share, requests) * clients / _site(sc, site).slots


def _scrape_failed(sc: Scenario, site: str) -> bool:
    """Whether the scenario fails `site`'s scrapes for part of the run."""
    return any(getattr(e, "metrics_down", None) == site for e in sc.events)


def _free(sc: Scenario, site: str) -> float:
    """`site`'s slots not held from outside (`_held`)."""
    spec = _site(sc, site)
    return max(spec.slots - _held(sc, spec), 0.0)


def _past_capacity_queue(sc: Scenario, clients: int, tolerance: float) -> float:
    """The most request-seconds queued that `past_capacity` accepts: what more clients
    than free slots force, plus the tolerance's part of the free slot-time left idle.

    In a closed loop with no think time, no hold and no shedding (`_closed_loop`) every
    client past the free slots waits in some queue all the time, whatever routes, and
    a slot left idle for a second queues one client more for that second (Little's
    law), so queued time is the excess over the measured span plus the idle slot-time.
    The simulator integrates the sites' queues at every change (`queued_s`); its
    sample once a scrape (`queue_s`, as a live grid's metrics read it) was 2-5 % high at
    three times the clients, which is the whole allowance (worlds 5, 117, 144, 192
    and 234 of `bench/bench_differential.py --clients-times 3` read 5-10 % idle by
    it and at most 0.3 % by the integral, serving more than the ideal). Idle slot-time
    up to the tolerance of the free slots (5 %) is what the harness lets the seed lose
    before it calls it collapsed. The count of requests that found a site full is not
    this measure: at a fixed excess it says where the queue was (a short wait at a
    large site counts one, as a whole service time at a one-slot site does), not how
    long anyone waited."""
    free = _free_total(sc)
    span = sc.duration_s - sc.warmup_s
    return (max(clients - free, 0.0) + tolerance * free) * span


def idle_beyond_excess(sc: Scenario, clients: int, queue_s: float) -> float | None:
    """Past capacity, the slot-time a run's requests queued beyond what its excess
    clients force, over the free slot-time: by the identity `_past_capacity_queue`
    reads (a slot left idle queues one more client), the part of the free slots left
    idle. `past_capacity` accepts up to the tolerance. None under capacity or with no
    free slots."""
    free = _free_total(sc)
    if not clients > free > 0:
        return None
    span = sc.duration_s - sc.warmup_s
    return (queue_s - (clients - free) * span) / (free * span)


def _closed_loop(sc: Scenario, row: dict[str, Any]) -> bool:
    """Whether `_past_capacity_queue`'s identity holds for the run: nothing shed,
    failed or held at a gateway (each waits outside the sites' queues) and no change
    in the client count."""
    return (
        row.get("shed", 0) == 0
        and row.get("failed", 0) == 0
        and sc.availability.max_queue_ms <= 0
        and not any(isinstance(e, ClientsEvent) for e in sc.events)
    )


def _room(sc: Scenario) -> list[str]:
    """The sites with slots free of outside load (`_free`)."""
    return [s.name for s in sc.sites if _free(sc, s.name) > 0]


def _free_total(sc: Scenario) -> float:
    """Slots not held from outside (`_held`), over every site."""
    return sum(_free(sc, s.name) for s in sc.sites)


def _two_site_share(sc: Scenario, site: str, share: float, clients: int) -> float:
    """The seed's two-site share of `site` at gridroute's own load: in flight there
    `share` x clients (the rest at the other site) beside what outside load holds, the
    capacities weighted as the plan weighs them (`explore_floor`)."""
    two = [_site(sc, name) for name in _room(sc)]
    top = max(s.slots for s in two)
    floor = AvailabilitySettings().explore_floor * top
    weight: list[float] = []
    rho: list[float] = []
    for s in sorted(two, key=lambda s: s.name != site):  # `site` first
        mine = share if s.name == site else 1.0 - share
        rho.append((_held(sc, s) + mine * clients) / s.slots)
        weight.append(max(s.slots, floor))
    return two_site_share(weight[0], rho[0], weight[1], rho[1])


def _noise(share: float, requests: int) -> float:
    """Three standard errors of a share drawn `requests` times: what the reference's own
    independent draws leave (a 36-request run of two equal sites splits 58/42)."""
    if requests <= 0:
        return 1.0
    return 3.0 * math.sqrt(max(share * (1.0 - share), 0.25 / requests) / requests)


def harness_world(kind: str, i: int) -> dict[str, Any]:
    """World `i` of `bench/bench_differential.py`'s `kind`: "own" (all load gridroute's,
    no failed scrapes) or "outside" (50-120 % of each site's slots held from outside).
    World `i` is the same whatever range draws it, so the numbers the tests, docs and
    BENCHMARKS.md cite name one world everywhere."""
    if kind == "own":
        return world(Random(f"own:{i}"), external=(0.0, 0.0), broken=False)
    if kind == "outside":
        return world(Random(f"outside:{i}"), external=(0.5, 1.2))
    raise ValueError(f"a harness world is 'own' or 'outside', not {kind!r}")


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
