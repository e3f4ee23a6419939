"""The default policy against the seed rule (`saturation`) in generated worlds (issue 23).

Each world is one instant of a grid from one gateway's side (tests/core/seed_worlds.py):
2-8 sites, capacities 1-256, in-flight from outside gridroute at 0-120 % of capacity,
1-8 gateways each holding 0-100 % of its part, failed scrapes and sites that publish no
load. The rules checked here:

1. Tiers: gridroute never sends a request to a site in a higher pressure tier (queue-free
   with room, queued with room, not full, the rest; on counted load) while a lower tier
   has room this gateway may admit into.
2. Most load from outside, one gateway: where the next request goes is within 5 points
   of the seed's, per site. With several gateways gridroute departs on purpose in one
   way: a site whose free room this gateway's fair share has used takes less from it
   (docs/selection.md, "Where gridroute departs from the seed rule"); it never sends
   more than the seed anywhere it may not admit.
3. The goodput rule (all load gridroute's) needs a stream over time: tests/sim/.

Worlds hypothesis shrank from failures are kept below as named regressions.
"""

from __future__ import annotations

from collections.abc import Iterator
from random import Random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridroute.core import Decision, OwnLoad, Policy, Snapshot, decide, view
from gridroute.core.settings import AvailabilitySettings
from gridroute.sim.tier_audit import NOT_TIERED, OWN_PART, SKIP, tier, tier_skip

from .seed_worlds import MODEL, NOW, World, WorldSite, shares, snapshot, worlds

N = 4000
TOLERANCE = 0.05
"""The issue's 5 points; each share is estimated from 4,000 draws (sd under 0.8 point)."""


def tier_skips(snap: Snapshot, own: OwnLoad, n: int, seed: int) -> Iterator[tuple[Decision, str]]:
    """Rule 1 over `n` requests arriving before the next poll (each routed one stays in
    flight): every decision that skipped a lower tier with admissible room, and why
    (`sim/tier_audit.py`: room by the estimate, within what the budgets grant; with none
    anywhere, a gateway borrows, so any site with room; this gateway's part of an
    over-full site before a borrow is on purpose and not yielded)."""
    plan = snap.plan(MODEL)
    assert plan is not None
    rng = Random(seed)
    for _ in range(n):
        counts = dict(own.counts)
        d = decide(snap, MODEL, rng, Policy.GRIDROUTE, own.counts, can_hold=False)
        if d.view is not None and d.path not in NOT_TIERED:
            cfg = snap.settings
            verdict = tier_skip(plan.healthy, counts, {}, d.view.key, cfg.shedding, cfg.fair_share)
            if verdict == SKIP:
                tiers = {v.site: tier(v, counts.get(v.key, 0)) for v in plan.healthy if v.loaded}
                yield (d, f"{d.path} chose {d.view.site}, tiers {tiers}")
        if d.view is not None:
            own.start(d.view.key, NOW + 0.01)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(world=worlds(), seed=st.integers(0, 2**16))
def test_gridroute_never_skips_a_tier_with_room(world: World, seed: int) -> None:
    snap, own = snapshot(world)
    assert [why for _, why in tier_skips(snap, own, 60, seed)] == []


@settings(max_examples=200, deadline=None, derandomize=True)
@given(world=worlds(finished=True), seed=st.integers(0, 2**16))
def test_gridroute_never_skips_a_tier_with_room_between_samples(world: World, seed: int) -> None:
    """Rule 1 where this gateway's requests finished after the sample: its budget at an
    over-full site (its part of the ceiling) then admits it where the estimate shows no
    room, and that site was drawn against sites with room within the budget."""
    snap, own = snapshot(world)
    assert [why for _, why in tier_skips(snap, own, 60, seed)] == []


@settings(max_examples=100, deadline=None, derandomize=True)
@given(
    world=worlds(finished=True),
    seed=st.integers(0, 2**16),
    fair_share=st.booleans(),
    shedding=st.booleans(),
)
def test_gridroute_never_skips_a_tier_with_room_under_other_settings(
    world: World, seed: int, fair_share: bool, shedding: bool
) -> None:
    """Rule 1 with fair share or shedding switched, on `decide`'s own picks: without
    fair share there are no budgets, so every site with room is admissible; with
    shedding on nothing past a budget is sent. (The audit's reading with fair share off
    is pinned by the hand-written case in the test after next.)"""
    cfg = AvailabilitySettings(fair_share=fair_share, shedding=shedding)
    snap, own = snapshot(world, cfg)
    assert [why for _, why in tier_skips(snap, own, 60, seed)] == []


def test_regression_an_over_full_sites_part_is_taken_after_room_within_the_budget() -> None:
    """Shrunk from rule 1 between samples: `b` queued and past its ceiling of 9 (gateway 0
    held 6 of its 12 at the sample, 3 have finished), so gateway 0's part of the ceiling,
    9 x 6 / 12, admits a fourth request where the estimate shows no room; `a` queued with
    room within gateway 0's budget. One pressure draw over both sent `b` some of them."""
    world = World(
        (
            WorldSite("a", 4, 0, (0, 1), queued=1),
            WorldSite("b", 22, 0, (6, 6), queued=3, finished=3),
        )
    )
    snap, own = snapshot(world)
    assert [why for _, why in tier_skips(snap, own, 30, seed=0)] == []


def test_the_tier_audit_names_the_own_part_before_a_borrow_and_a_skip() -> None:
    """`sim/tier_audit.tier_skip` on the world above: `b` while `a` has room within the
    budget is a skip; `b` once `a`'s room is past the budget (this gateway holds 2 there,
    its budget 1.4) is its own part before a borrow, on purpose; with shedding on nothing
    past the budget is sent, so no lower tier is there to keep to."""
    world = World(
        (
            WorldSite("a", 4, 0, (0, 1), queued=1),
            WorldSite("b", 22, 0, (6, 6), queued=3, finished=3),
        )
    )
    snap, own = snapshot(world)
    plan = snap.plan(MODEL)
    assert plan is not None
    now = dict(own.counts)
    assert tier_skip(plan.healthy, now, {}, "b/p", False) == SKIP
    assert tier_skip(plan.healthy, now, {}, "a/p", False) is None
    past = {**now, "a/p": 2}
    assert tier_skip(plan.healthy, past, {}, "b/p", False) == OWN_PART
    assert tier_skip(plan.healthy, past, {}, "b/p", True) is None
    # With fair share off there are no budgets: `a` has room, so it is admissible.
    assert tier_skip(plan.healthy, past, {}, "b/p", False, fair_share=False) == SKIP
    assert tier_skip(plan.healthy, past, {}, "b/p", True, fair_share=False) == SKIP


def test_regression_borrowing_takes_queue_free_sites_first() -> None:
    """Shrunk from rule 1: past its share at both sites, a gateway borrowed the queued
    site as often as the queue-free one (one pressure draw over both)."""
    world = World(
        (
            WorldSite("a", 40, 20, (5, 5)),
            WorldSite("b", 40, 20, (5, 5), queued=3),
        )
    )
    snap, own = snapshot(world)
    skips = list(tier_skips(snap, own, 30, seed=3))
    assert skips == []


def _compare(world: World, seed: int) -> dict[str, tuple[float, float]]:
    """Per site (and outcome), the share of the next request under each policy."""
    snap, own = snapshot(world)
    mine = shares(snap, own, Policy.GRIDROUTE, N, seed)
    theirs = shares(snap, own, Policy.SATURATION, N, seed + 1)
    return {k: (mine[k] / N, theirs[k] / N) for k in set(mine) | set(theirs)}


@settings(max_examples=100, deadline=None, derandomize=True)
@given(world=worlds(external=(0.5, 1.2), gateways=(1, 1)), seed=st.integers(0, 2**16))
def test_one_gateway_in_a_loaded_world_splits_like_the_seed(world: World, seed: int) -> None:
    if world.external_fraction < 0.5:
        return  # most of the load must come from outside
    far = {k: v for k, v in _compare(world, seed).items() if abs(v[0] - v[1]) > TOLERANCE}
    assert far == {}


@settings(max_examples=100, deadline=None, derandomize=True)
@given(world=worlds(external=(0.5, 1.2), gateways=(2, 8)), seed=st.integers(0, 2**16))
def test_several_gateways_depart_only_where_their_share_is_used(world: World, seed: int) -> None:
    if world.external_fraction < 0.5:
        return
    snap, own = snapshot(world)
    plan = snap.plan(MODEL)
    assert plan is not None
    admits = {
        v.site
        for v in plan.healthy
        if v.loaded
        and v.base + own.counts.get(v.key, 0) + 1 <= v.room_ceiling
        and own.counts.get(v.key, 0) + 1 <= v.budget
    }
    for site, (mine, theirs) in _compare(world, seed).items():
        if mine > theirs + TOLERANCE:
            # More than the seed only where this gateway may admit (or what the seed
            # does too when nothing has room: the overflow tiers, hold or shed).
            assert site in admits or not admits, (site, mine, theirs, admits)


def test_regression_a_site_full_from_outside_ranks_full_at_every_gateway() -> None:
    """The issue's first world: four equal sites, one nearly full from outside and one
    full; several gateways each ranked the nearly full one by its share of all others'
    in-flight (external included), so it drew requests while two sites were mostly
    free. The seed's pressure draw sends it none; gridroute now counts external load
    whole when it ranks."""
    world = World(
        (
            WorldSite("a", 100, 90, (1, 1, 1, 1)),
            WorldSite("b", 100, 100, (0, 0, 0, 0)),
            WorldSite("c", 100, 0, (15, 15, 15, 15)),
            WorldSite("d", 100, 0, (15, 15, 15, 15)),
        )
    )
    snap, own = snapshot(world)
    got = shares(snap, own, Policy.GRIDROUTE, N, 1)
    assert got["a"] == 0
    assert got["c"] + got["d"] == N
    a = next(v for v in snap.views if v.site == "a")
    # 90 % of its ceiling held from outside: the other gateways' 3 weigh 0.25 + 0.75 x
    # 0.8 (OUTSIDE_RANKED_WHOLE_FROM = 0.5), not their share alone.
    assert a.external == 90 and a.pick_rho(1) == pytest.approx((1 + 0.85 * 3 + 90) / 100)


def test_regression_other_gateways_load_ranks_nearer_whole_at_a_site_mostly_held_from_outside(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Shrunk from the harness's world 253 (5 gateways): a site 93 % held from outside,
    where the gateways hold 6 of the 11 slots left, beside one 95 % held and one with
    room. Ranked at this gateway's share (0.21), the others' 5 there read as 1 and the
    site as emptier than the 95 % one (0.940 against 0.951), so it won every pair drawn
    without the site with room: 52 % of the picks, where the seed's pressure draw gives
    it none. Ranked nearer whole where outside load holds most of the ceiling (0.963),
    it loses those pairs as under the seed, and the picks are the seed's."""
    world = World(
        (
            WorldSite("s0", 122, 116, (0, 0, 0, 0, 0)),
            WorldSite("s1", 150, 139, (1, 1, 1, 2, 1)),
            WorldSite("s2", 70, 42, (3, 3, 3, 3, 1)),
        )
    )
    snap, own = snapshot(world)
    seed = shares(snap, own, Policy.SATURATION, N, 1)
    assert seed["s1"] == 0
    assert shares(snap, own, Policy.GRIDROUTE, N, 1) == seed
    monkeypatch.setattr(view, "OUTSIDE_RANKED_WHOLE_FROM", 0.9999)  # at the share alone
    snap, own = snapshot(world)
    assert shares(snap, own, Policy.GRIDROUTE, N, 1)["s1"] > N // 5


def test_regression_two_equal_sites_split_evenly_over_a_stream() -> None:
    """The issue's third world: two equal, lightly loaded sites. Each pick drawn on its
    own wandered by 0.5/sqrt(N); gridroute's two-site picks now carry the fraction
    (core/spread.py), so over any stream the split is within a request of even."""
    world = World((WorldSite("a", 100, 5, (3,)), WorldSite("b", 100, 5, (3,))))
    snap, own = snapshot(world)
    got = shares(snap, own, Policy.GRIDROUTE, 4001, 5)
    assert abs(got["a"] - got["b"]) <= 1


def test_regression_a_failed_scrape_does_not_shrink_the_share_elsewhere() -> None:
    """Shrunk from rule 2: one gateway, with a request at a site whose scrape fails. Its
    report of that request was subtracted from the polled load, which holds no reading
    of that site, so outside load read as its own and its share fell to the floor: the
    sites with room took nothing and the one it did admit into was the busiest."""
    world = World(
        (
            WorldSite("s0", 40, 20, (0,)),
            WorldSite("s1", 1, 1, (0,)),
            WorldSite("s2", 1, 1, (0,)),
            WorldSite("s3", 1, 1, (0,)),
            WorldSite("s4", 1, 0, (1,), scrape="failed"),
        )
    )
    snap, _ = snapshot(world)
    assert {v.site: v.share for v in snap.views}["s0"] == 1.0
    far = {k: v for k, v in _compare(world, 7).items() if abs(v[0] - v[1]) > TOLERANCE}
    assert far == {}


def test_regression_a_refresh_without_reports_keeps_external_load_ranked() -> None:
    """From review: a refresh with no gateway reports (a health change, a poll reply
    without the sums) dropped each site's external part, so the site full from outside
    ranked nearly empty again until the next poll."""
    world = World(
        (
            WorldSite("a", 100, 90, (1, 1, 1, 1)),
            WorldSite("c", 100, 0, (15, 15, 15, 15)),
            WorldSite("d", 100, 0, (15, 15, 15, 15)),
        )
    )
    snap, own = snapshot(world, reread=True)
    a = next(v for v in snap.views if v.site == "a")
    assert a.external == 90
    assert shares(snap, own, Policy.GRIDROUTE, N, 2)["a"] == 0
