"""The default policy against the seed rule over time, in generated worlds (issue 23).

The same request stream (scenario seed) runs under `gridroute` and `saturation`
(`sim/compare.py`). Worlds are `compare.world` drawn from a seed hypothesis picks (derandomized, so
every run tries the same worlds):

* all load gridroute's own: gridroute completes at least as many requests;
* most load from outside: every site's share of the completed requests is within 5
  points of the seed's, or the difference is one `compare` names on purpose
  (docs/selection.md, "Where gridroute departs from the seed rule").
"""

from __future__ import annotations

from random import Random
from types import SimpleNamespace

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gridroute.core import Policy
from gridroute.sim.compare import Comparison, SiteDiff, compare, harness_world, world
from gridroute.sim.engine import SimRun
from gridroute.sim.scenario import Scenario, parse_scenario

BOTH = [Policy.GRIDROUTE, Policy.SATURATION]
SHORT = {"duration_s": 10.0, "max_clients": 160}


def _outside(world_id: int) -> Scenario:
    """The harness's outside-load world `world_id` (`bench/bench_differential.py`)."""
    return parse_scenario(harness_world("outside", world_id))


def _judged(sc: Scenario, site: str) -> tuple[Comparison, SiteDiff]:
    """`sc` under both policies on the same stream, and how `site`'s difference reads."""
    (c,) = compare(sc, BOTH)
    (d,) = [d for d in c.sites if d.site == site]
    return c, d


def _fixed_and_undone(  # type: ignore[no-untyped-def]
    monkeypatch, world_id: int, site: str
) -> tuple[tuple[Comparison, SiteDiff], tuple[Comparison, SiteDiff]]:
    """`_judged` on outside-load world `world_id`, then again with the external-ranking
    fix undone (gridroute's split of external load over the sites: the defect the
    rules must never hide)."""
    from gridroute.core import gridstate

    sc = _outside(world_id)
    fixed = _judged(sc, site)
    monkeypatch.setattr(gridstate, "_apportion", lambda external, unreported: {})
    return fixed, _judged(sc, site)


@settings(max_examples=8, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32))
def test_all_load_our_own_gridroute_serves_at_least_the_seed(seed: int) -> None:
    sc = parse_scenario(world(Random(seed), external=(0.0, 0.0), broken=False, **SHORT))
    (c,) = compare(sc, BOTH)
    served = {p: r["requests"] for p, r in c.rows.items()}
    assert served["gridroute"] >= served["saturation"], served


@settings(max_examples=10, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**32))
def test_most_load_from_outside_shares_follow_the_seed_or_a_named_rule(seed: int) -> None:
    sc = parse_scenario(world(Random(seed), external=(0.5, 1.2), **SHORT))
    outside = sum(s.external.in_flight for s in sc.sites if s.external is not None)
    assume(outside >= sc.client_counts[0])  # most of the in-flight is not gridroute's
    (c,) = compare(sc, BOTH)
    assert c.unexplained == []


def test_regression_a_one_slot_site_shared_by_seven_gateways() -> None:
    """Own-load world 43 of `bench/bench_differential.py` (sites of 19, 89 and 1 slots, 7
    gateways, 18 clients): every gateway's budget at the 1-slot site is a fraction of
    it, and rounded up while the gateway had whole room elsewhere, two gateways took the
    slot at once (818 requests, 6 overshoots, against the seed rule's 828). A fraction
    is now rounded up only where the gateway has no whole budget left."""
    sc = parse_scenario(harness_world("own", 43))
    (c,) = compare(sc, BOTH)
    served = {p: r["requests"] for p, r in c.rows.items()}
    assert served["gridroute"] >= served["saturation"], served
    assert c.rows["gridroute"]["overshoot"] == 0, c.as_dict()


def test_regression_four_sites_one_nearly_full_one_full_from_outside() -> None:
    """The issue's first world at 4 gateways: the site 90 % full from outside took 6 % of
    the requests while two sites were about a third free (the seed: under 1 %)."""
    sites = [
        {"name": "a", "slots": 100, "external": {"in_flight": 90}},
        {"name": "b", "slots": 100, "external": {"in_flight": 100}},
        {"name": "c", "slots": 100},
        {"name": "d", "slots": 100},
    ]
    sc = parse_scenario({"duration_s": 20, "warmup_s": 4, "sites": sites, "gateways": 4})
    row = SimRun(sc, Policy.GRIDROUTE, 128).run().row
    assert row["shares"]["a"] <= 0.01 and row["shares"]["b"] == 0.0, row["shares"]
    assert row["overshoot"] == 0


@pytest.mark.parametrize("seed", range(1, 5))
def test_regression_the_first_world_live_sized_from_the_first_request(seed: int) -> None:
    """The issue's first world at the size of its live test (`tests/e2e/test_worlds_grid.py`:
    24-slot sites, 20 and 24 held from outside, four gateways, 32 clients, quarter-second
    scrapes and polls), measured from the first request. A ranking that took this
    gateway's own change since the sample again for each peer (the herd term, tried and
    reverted 2026-12-06) read a free site full whenever one gateway's first picks split
    unevenly between the two, and sent the nearly full site 4-11 requests a run here
    with up to 5 overshoots (main: none); live it sent 5-29 of 384. The simulator's
    generated worlds, larger and measured after a warm-up, did not show it."""
    sites = [
        {"name": "a", "slots": 24, "external": {"in_flight": 20}},
        {"name": "b", "slots": 24, "external": {"in_flight": 24}},
        {"name": "c", "slots": 24},
        {"name": "d", "slots": 24},
    ]
    sc = parse_scenario(
        {
            "duration_s": 4,
            "warmup_s": 0.0,
            "sites": sites,
            "gateways": 4,
            "seed": seed,
            "scrape_interval_s": 0.25,
            "poll_interval_s": 0.25,
        }
    )
    row = SimRun(sc, Policy.GRIDROUTE, 32).run().row
    assert row["shares"]["a"] * row["requests"] <= 1 and row["shares"]["b"] == 0.0, row
    assert row["overshoot"] == 0, row


def test_regression_a_site_smaller_than_the_ceiling_floor() -> None:
    """Shrunk from the outside-load worlds: a 7-slot site with 5 slots held from outside
    read as 8 slots (the ceiling floor) and was overshot by gridroute's gateways; a
    declared capacity now bounds the floor."""
    sites = [
        {"name": "big", "slots": 200, "external": {"in_flight": 130}},
        {"name": "tiny", "slots": 7, "external": {"in_flight": 5}},
    ]
    sc = parse_scenario({"duration_s": 15, "warmup_s": 3, "sites": sites, "gateways": 4})
    row = SimRun(sc, Policy.GRIDROUTE, 40).run().row
    assert row["overshoot_by_site"]["tiny"] <= 2, row["overshoot_by_site"]


@pytest.mark.parametrize("seed", range(10))
def test_two_equal_idle_sites_split_within_two_points(seed: int) -> None:
    """The issue's third world: 4,000 requests over two equal, lightly loaded sites stay
    within 2 points of 50/50 for every one of 10 seeds (the seed rule's independent
    draws wander by about 0.8 point per seed, over 2 at times)."""
    sites = [{"name": "a", "slots": 100}, {"name": "b", "slots": 100}]
    sc = parse_scenario(
        {
            "duration_s": 14,
            "warmup_s": 4,
            "seed": seed,
            "sites": sites,
            "service": {"distribution": "exponential", "mean_s": 0.2},
        }
    )
    row = SimRun(sc, Policy.GRIDROUTE, 80).run().row
    assert row["requests"] >= 3800
    assert abs(row["shares"]["a"] - 0.5) <= 0.005, row["shares"]  # the target: 0.02


def test_compare_does_not_explain_away_external_load_ranked_at_the_share(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """From review: with the external-ranking fix undone, a site mostly full from outside
    beside two empty ones must read as unexplained, not as one of the named departures.

    The issue's first world (a 100-slot site 90 % held) is too small for this now: the
    defect's whole effect there is the site's free slots that the gateways' floored
    budgets leave (5.4 share points, within the 5-point tolerance and its noise). At
    400 slots, 340 held from outside, the defect sends the site 15 % of the requests
    (the seed: none), and the fix none."""
    from gridroute.core import gridstate

    sites = [
        {"name": "a", "slots": 400, "external": {"in_flight": 340}},
        {"name": "b", "slots": 100, "external": {"in_flight": 100}},
        {"name": "c", "slots": 100},
        {"name": "d", "slots": 100},
    ]
    sc = parse_scenario(
        {"duration_s": 20, "warmup_s": 4, "sites": sites, "gateways": 4, "clients": [128]}
    )
    (fixed,) = compare(sc, BOTH)
    assert fixed.unexplained == [] and fixed.sites[0].shares["gridroute"] <= 0.01, fixed.as_dict()
    monkeypatch.setattr(gridstate, "_apportion", lambda external, unreported: {})
    (c,) = compare(sc, BOTH)
    # `a`, and the losses that went to it (not `fair_share`: `_toward_fuller`)
    assert "a" in [d.site for d in c.unexplained], c.as_dict()
    assert all(d.delta < 0 for d in c.unexplained if d.site != "a"), c.as_dict()


def test_a_collapsed_seed_does_not_explain_a_site_left_the_fullest(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """From review: where the seed's goodput collapsed, its shares follow its queues,
    but a gain gridroute takes at a site mostly held from outside must still follow the
    seed's own rule at gridroute's loads. With the external-ranking fix undone, world
    96's s0 (86 % held from outside, three sites with room) takes 23 % of the requests
    and ends the fullest site (0.942 against 0.90 and 0.90): the power of two choices
    sends a site requests only while it is the emptier of a pair, so that was read as
    `seed_overshoots` and is `unexplained` now. With the fix the site is within the
    tolerance."""
    fixed, undone = _fixed_and_undone(monkeypatch, 96, "s0")
    assert fixed[1].departure is None, fixed[0].as_dict()
    assert undone[1].departure == "unexplained", undone[0].as_dict()


def test_seed_pairs_does_not_name_a_site_whose_group_is_every_site(  # type: ignore[no-untyped-def]
    monkeypatch,
) -> None:
    """From review: with the external-ranking fix undone, world 63's s0 (8 slots, 75 %
    held from outside, which the seed overshot) takes 8.8 % of the requests where the
    seed gives it 0.3 %. Its share's noise as pressure spans all three sites with room
    (0.902-0.932), so the pair draw allows it anything; `seed_pairs` named it until a
    group that is every site with room was refused. It reads `level` now: 8.8 % is
    within 5 points of its level share (9.7 %: every site used at one pressure), where
    the sound policy sends it 4.0 % and the seed 0.3 %. The defect moved it toward the
    level, which no comparison with the seed's rule can call worse."""
    from gridroute.core import gridstate

    monkeypatch.setattr(gridstate, "_apportion", lambda external, unreported: {})
    sc = _outside(63)
    c, d = _judged(sc, "s0")
    assert d.departure == "level", c.as_dict()


def test_fair_share_does_not_name_the_defects_loss_at_the_emptiest_site(  # type: ignore[no-untyped-def]
    monkeypatch,
) -> None:
    """From the harness's defect count (`bench/bench_differential.py --defect`): with the
    external-ranking fix undone, world 519 (5 gateways) moves 9 points from s1, the
    emptiest site with room (0.721), to two sites 77 % held, left at 0.83, each gain
    within the tolerance of the seed's share. s1's loss read `fair_share` and the world
    read clean; it is `unexplained` now. With the fix s1 is within the tolerance."""
    fixed, undone = _fixed_and_undone(monkeypatch, 519, "s1")
    assert fixed[1].departure is None, fixed[0].as_dict()
    assert undone[1].departure == "unexplained", undone[0].as_dict()


@pytest.mark.parametrize(("world_id", "site"), [(360, "s2"), (209, "s1")])
def test_other_streams_do_not_explain_away_a_difference_the_defect_keeps(  # type: ignore[no-untyped-def]
    monkeypatch, world_id: int, site: str
) -> None:
    """A site `unexplained` on the world's own request stream is run on seven more, and
    is `stream_noise` only where the policies' difference is shown within the tolerance
    at 95 % (mean plus t standard errors). With the external-ranking fix undone, world
    360's s2 gains 6.4 points on the world's own stream and 4.5 +- 0.8 on average over
    eight (5-6.5 on most); 209's s1 moves gridroute's share from 36 to 41 % while the
    seed's swings so much between streams that the mean difference is +0.9 +- 2.4
    (review: a margin of one standard error named it noise). Both stay `unexplained`;
    with the fix both are within the tolerance."""
    fixed, (c, d) = _fixed_and_undone(monkeypatch, world_id, site)
    assert fixed[1].departure is None, fixed[0].as_dict()
    assert d.departure == "unexplained" and len(d.streams) == 8, c.as_dict()


def test_past_capacity_does_not_explain_a_run_that_leaves_slots_idle() -> None:
    """From review: `past_capacity` reads the time gridroute's requests queued, so a
    defect that leaves free slots idle past capacity is not named by it. World 5 with
    the gateway's own counts off (its picks read only poll-old samples) serves 1,646
    requests where the free slots take 5,220 and queues 865 request-seconds, where its
    17 excess clients force 153; the old bound on the count of requests that found a
    site full (240, bound 842) named s5 `past_capacity`."""
    spec = harness_world("outside", 5)
    spec["availability"] = {"local_accounting": False}
    c, d = _judged(parse_scenario(spec), "s5")
    assert d.departure == "unexplained", c.as_dict()
    spec.pop("availability")
    c, d = _judged(parse_scenario(spec), "s5")
    assert d.departure == "past_capacity", c.as_dict()


@pytest.mark.parametrize(
    ("world_id", "site", "rule"),
    [
        # More clients than slots free of outside load: the seed's run collapsed (its
        # requests queued for good behind outside load), gridroute's share is the site's
        # part of the free slots.
        (5, "s5", "past_capacity"),
        # Past capacity at 8 gateways: every gateway's floor at an over-full site
        # idled slots there while the request it refused queued elsewhere (4,502
        # requests, 462 overshoots, past the 446 the excess forces). With the part
        # granted where nothing holds or sheds and the floors hold the gateway back,
        # the overshoot is within what the excess forces.
        (18, "s1", "past_capacity"),
        # Past capacity at 3 gateways (240 clients, 237 free slots): 172 requests found
        # a site full, past the 149 that a whole service time's wait each would force,
        # but its requests queued 40 request-seconds (integrated), against the 27 its 3
        # excess clients force over the 9 s span and the 134 `past_capacity` allows:
        # the excess queued at large sites, briefly each.
        (205, "s2", "past_capacity"),
        # Two sites with room: the seed overshot the fuller one, then read it full and
        # dropped it; gridroute gave it the two-site rule's share at its own load.
        (38, "s0", "two_site_weighted"),  # world 34 s1 was the other; within 5 points now
        # The gain came from sites more held from outside, together (world 43's s1 was
        # the other such site; since fractions are rounded up only where a gateway
        # needs them, it is within 5 points).
        (47, "s5", "counted_load"),
        # Past 120 worlds: one gateway equalising pressure on counted load, where the
        # seed left the sites it took from fuller (0.708 against 0.689).
        (184, "s1", "counted_load"),
        # Past 480 worlds, one gateway: the seed left one site fuller than the rest
        # (518 s4 at 0.865 beside s2 at 0.743, its scrape failing; 530 s3; 596 s4),
        # gridroute levelled them on counted load. The gain was named; now the loss too.
        (518, "s4", "counted_load"),
        (530, "s3", "counted_load"),
        (596, "s4", "counted_load"),
        # Two sites with room, 6 gateways, 10 clients: the small site's 3 free slots are
        # under one slot of every gateway's part, so the floors leave it unused and the
        # other site takes all (the seed sent the small one 18 % and overshot it 8 times).
        (629, "s1", "knock_on"),
        # The same at 6 gateways and 4 clients, where the loss went to a fuller site
        # mostly held from outside (s1, 90 %): the floors are budgets, which no ranking
        # moves (`_floored`), so the loss is named for them (the seed sent s0 23 %).
        (2048, "s0", "fair_share"),
        (2048, "s1", "knock_on"),
        # Five gateways, 132 clients: a site 67 % held from outside, where the ranking
        # weighs the other gateways' load about half way to whole, left the fullest as
        # it is (0.976 against 0.949) but the emptiest as the gateways read it (0.857
        # against 0.878-0.926): the share ranking's discount (`_ranked_fullest`).
        (670, "s1", "share_ranked"),
        # Two sites with room: the seed read the smaller one out of its tier (2.2 % of
        # its requests, its own two-site share there 19 %) while its scrape failed.
        (132, "s0", "two_site_weighted"),
        # One gateway, two sites with room: the seed overshot the small one in the
        # warm-up only, and its rho, smoothed over that, kept the site out of its tier
        # for the whole measured span (0 % of its requests, its formula 13 %).
        (400, "s2", "two_site_weighted"),
        # One gateway, two sites with room: what the small one gained under the two-site
        # rule the large one gave up (with one gateway nothing else named the loss).
        (374, "s2", "two_site_weighted"),
        # One gateway, three sites with room, two of them 95 and 96 % held from outside:
        # the seed overshot both (6 and 9 times) and its reading then held them out of
        # its tier (6.5 % and 8.3 %); gridroute, with none, kept them in, and they won
        # the pairs drawn without the third (17.7 % and 24.7 %: the draw gives the pair
        # 42.6 %, and they end within the noise of each other, 0.979 both), which took
        # the rest, as every pair with it (57.6 %, the draw's 57.4 %).
        (632, "s0", "seed_pairs"),
        (632, "s1", "seed_pairs"),
        (632, "s2", "seed_pairs"),
        # Past 960 worlds: the seed overshot a site that the gainer beats, and the pairs
        # it wins went with it (`_dropped_pairs`). 1215 (one gateway): s7, s6's
        # group-mate (their pair 22.8 % by the draw and by gridroute, 6.6 % by the seed,
        # none without s7), and s5's loss that paid s6; 1221: s0, the one site s4 beats
        # (10.1 % by the draw, 5.9 % by gridroute, 0.4 % by the seed).
        (1215, "s6", "seed_pairs"),
        (1215, "s5", "seed_pairs"),
        (1221, "s4", "seed_pairs"),
        # The seed overshot the fuller sites and held them out of its tier for a while
        # after each; gridroute's shares lie between the seed's and what its pair draw
        # gives at gridroute's loads (253: the emptiest s2 wins 47.8 % of the pairs,
        # gridroute gave it 66.4 %, the seed 83.8 %; 1390: s2 71.9 %, 77.7 %, 85.1 %).
        (253, "s1", "seed_pairs"),
        (253, "s2", "seed_pairs"),
        (1390, "s0", "seed_pairs"),
        (1390, "s2", "seed_pairs"),
        # Four gateways: the seed left s3 at 0.627 beside s0 and s4 at 0.594 and 0.585;
        # gridroute levels the three at 0.604-0.607 (s4's gain `share_ranked`, s0's
        # within 5 points), and two sites 75 % held take no more than their one pair.
        (1069, "s3", "counted_load"),
        # Seven gateways: a site 65 % held, left the fullest with room (0.981 against
        # 0.951 and under), read emptier than the four sites it wins pairs against but
        # 56 % held s0, which the budgets keep at 2.3 % (0.593 as read); those pairs are
        # 48.6 % of the draw, gridroute gave it 47.0 % (`_ranked_fullest`).
        (1157, "s2", "share_ranked"),
        # Gains and losses that leave gridroute's share within 5 points of the site's
        # level share (every site it uses at one pressure: where the seed's pairs are
        # ties), the seed's further from it (`_at_level`). 602 and 1080: the seed's run
        # collapsed (1,258 of 5,229 and 1,843 of 4,886 requests); 602 s1 16.3 % (level
        # 13.6 %, the seed 1.1 %). 247 s2: 7.2 % (level 7.2 %, the seed none). 1080 s3
        # was 35.2 % (33.0 %, 24.8 %); since an over-full site's part comes after room
        # within the budget (`select.decide`), 32.9 % with 5 overshoots there where it
        # had 11, and `seed_overshoots`, read before `level`, names it (the seed 186).
        (602, "s1", "level"),
        (1080, "s3", "seed_overshoots"),
        (247, "s2", "level"),
        # Sites mostly held from outside that gridroute's ranking of other gateways' load
        # at its share left the fullest of all (+8 to +20 points over 5 streams). Ranked
        # nearer whole there (`view.OUTSIDE_RANKED_WHOLE_FROM`), 326 s0 and 343 s2 are
        # within 5 points; 240 s0 and 452 s1 are no longer the fullest site with room,
        # so the seed's collapse (1,324 of 1,656 requests; 98 and 9 overshoots there)
        # explains their gain; 433 s3 differs on its own stream only.
        (240, "s0", "seed_overshoots"),
        (326, "s0", None),
        (452, "s1", "seed_overshoots"),
        (343, "s2", None),
        (433, "s3", "stream_noise"),
        # `stream_noise` named these two (below); now within 5 points on their own
        # stream (+4.3 and +2.4).
        (146, "s1", None),
        (233, "s5", None),
        # Two sites with room, 5 gateways: the seed overshot the small site (92 % held
        # from outside) 111 times and held it out (1.3 %); gridroute kept it in the tier
        # at 7.9 %, under the seed's two-site share at its load (39 %), overshooting it twice:
        # no more than the seed, as every rule here asks (it asked for none).
        (1499, "s0", "two_site_weighted"),
        (1499, "s1", "two_site_weighted"),
    ],
)
def test_regression_departures_found_by_the_harness_are_named(
    world_id: int, site: str, rule: str | None
) -> None:
    """Site differences `bench/bench_differential.py` left unexplained until a rule named
    them (docs/selection.md, "Where gridroute departs from the seed rule"), or until a
    fix brought them within the tolerance (None)."""
    sc = _outside(world_id)
    c, d = _judged(sc, site)
    assert d.departure == rule, c.as_dict()
    assert not c.unexplained, c.as_dict()


def _held_sites(sites: list[tuple[str, int, int]], clients: int, gateways: int = 1) -> Scenario:
    """A scenario of (name, slots, in-flight held from outside) sites."""
    return parse_scenario(
        {
            "sites": [
                {"name": n, "slots": slots, "external": {"in_flight": held}}
                for n, slots, held in sites
            ],
            "clients": [clients],
            "gateways": gateways,
        }
    )


def test_seed_pairs_reads_the_seeds_pair_draw_at_gridroutes_loads() -> None:
    """`_pair_groups`: three sites of equal slots (each pair drawn a third of the time).
    The emptiest wins both its pairs (2/3); two within the noise of each other are one
    group, which wins their pair (1/3) and either may; one fuller beyond the noise of
    both others wins none."""
    from gridroute.sim.compare import _pair_groups

    sc = _held_sites([("a", 100, 50), ("b", 100, 80), ("c", 100, 80)], 30)
    room = ["a", "b", "c"]
    # pressures: a 0.65, b and c 0.875 each
    row = {"requests": 100_000, "shares": {"a": 0.5, "b": 0.25, "c": 0.25}}
    got = [(sorted(g), p) for g, p in _pair_groups(sc, room, row, 30)]
    assert got == [(["a"], pytest.approx(2 / 3)), (["b", "c"], pytest.approx(1 / 3))]
    # pressures: a 0.56, b 0.86, c 0.98
    row = {"requests": 100_000, "shares": {"a": 0.2, "b": 0.2, "c": 0.6}}
    got = [(sorted(g), p) for g, p in _pair_groups(sc, room, row, 30)]
    assert got == [
        (["a"], pytest.approx(2 / 3)),
        (["b"], pytest.approx(1 / 3)),
        (["c"], pytest.approx(0.0)),
    ]


def test_seed_pairs_weighs_the_draw_as_the_plan_does() -> None:
    """Capacity-weighted pairs drawn without replacement, small sites lifted to the
    plan's `explore_floor` (0.25) of the largest measured site, with room or not: here
    the 400-slot site full from outside lifts the 20-slot one to 100."""
    from gridroute.sim.compare import _pair_groups

    sc = _held_sites([("a", 200, 100), ("b", 100, 60), ("c", 20, 10), ("d", 400, 400)], 10)
    room = ["a", "b", "c"]
    # pressures: a 0.5, c 0.55, b 0.6 (a million requests: no noise to group them)
    row = {"requests": 1_000_000, "shares": {"a": 0.0, "b": 0.0, "c": 0.1}}
    w = {"a": 200.0, "b": 100.0, "c": 100.0}
    total = sum(w.values())

    def pair(x: str, y: str) -> float:
        return w[x] / total * w[y] / (total - w[x]) + w[y] / total * w[x] / (total - w[y])

    got = {tuple(g): p for g, p in _pair_groups(sc, room, row, 10)}
    assert got == {
        ("a",): pytest.approx(pair("a", "b") + pair("a", "c")),
        ("c",): pytest.approx(pair("c", "b")),
        ("b",): pytest.approx(0.0),
    }


def _named_seed_pairs(
    sites: list[tuple[str, int, int]],
    ours: dict[str, float],
    ref: dict[str, float],
    seed_overshot: set[str],
) -> set[str]:
    """The sites `_seed_pairs` names where gridroute's and the seed's shares of 100,000
    requests each (30 clients, one gateway) are `ours` and `ref`, the seed overshot
    `seed_overshot` 5 times each, and every difference reads `unexplained` before it."""
    from gridroute.sim.compare import UNEXPLAINED, _seed_pairs

    sc = _held_sites(sites, 30)
    room = [n for n, _, _ in sites]
    over = {n: 5 if n in seed_overshot else 0 for n in room}
    rows = {
        "gridroute": {"requests": 100_000, "shares": ours},
        "saturation": {"requests": 100_000, "shares": ref, "overshoot_by_site": over},
    }
    diffs = [
        SiteDiff(
            n,
            {"gridroute": ours[n], "saturation": ref[n]},
            {"gridroute": 0, "saturation": over[n]},
            ours[n] - ref[n],
            UNEXPLAINED,
        )
        for n in room
    ]
    out = _seed_pairs(sc, room, diffs, rows, "gridroute", "saturation", 30, 0.05)
    return {d.site for d in out if d.departure == "seed_pairs"}


@pytest.mark.parametrize(
    ("seed_overshot", "named"),
    [
        ({"c"}, {"a", "d", "b", "c"}),
        ({"b"}, {"a", "d", "b", "c"}),
        ({"a"}, set()),
        ({"d"}, set()),
    ],
)
def test_seed_pairs_names_the_pairs_the_seeds_overshoot_dropped(
    seed_overshot: set[str], named: set[str]
) -> None:
    """`_seed_pairs` (`_dropped_pairs`): four equal sites, gridroute's shares the pair
    draw's at its loads (`a` wins 3 of 6 pairs, `d` 2, `b` and `c`, within the noise of
    each other, the pair between them), and the seed sent `b` and `c` 5 % where the
    draw gives them 16.7 %. A site the seed overshot leaves its tier, and with it the
    pairs it was drawn in: without `b` or `c` the other wins no pair at all, so the seed's
    5 % is what its own draw gives, and both gains (and the losses that paid them) are
    named (worlds 1215 s6 and 1221 s4). An overshoot only at an emptier site drops no
    pair `b` or `c` wins, so their gains stay `unexplained`."""
    sites = [("a", 100, 40), ("d", 100, 60), ("b", 100, 80), ("c", 100, 80)]
    ours = {"a": 1 / 2, "d": 1 / 3, "b": 1 / 12, "c": 1 / 12}
    ref = {"a": 0.55, "d": 0.40, "b": 0.045, "c": 0.005}
    assert _named_seed_pairs(sites, ours, ref, seed_overshot) == named


@pytest.mark.parametrize(
    ("ref", "named"),
    [
        ({"a": 0.45, "d": 0.4, "b": 0.08, "c": 0.07, "f": 0.0}, {"a", "d", "b", "c"}),
        ({"a": 0.5, "d": 0.45, "b": 0.03, "c": 0.02, "f": 0.0}, set()),
    ],
)
def test_seed_pairs_reads_what_an_overshoot_at_a_fuller_site_drops(
    ref: dict[str, float], named: set[str]
) -> None:
    """`_dropped_pairs`, the shape of world 1221: five equal sites, the group `b`-`c` wins
    30 % of the pairs (its own and those with the fullest, `f`), and the seed overshot
    only `f`. Without `f` the group still wins its own pair, 1/6 of the draw over four
    sites. A seed share of 15 % is then what its draw without `f` explains (the gains and
    the losses that paid them are named); 5 % is not: losing `f` explains part of the
    shortfall only, and the gains stay `unexplained`."""
    sites = [("a", 100, 30), ("d", 100, 50), ("b", 100, 70), ("c", 100, 70), ("f", 100, 90)]
    ours = {"a": 0.4, "d": 0.3, "b": 0.15, "c": 0.15, "f": 0.0}
    assert _named_seed_pairs(sites, ours, ref, {"f"}) == named


@pytest.mark.parametrize(("share", "named"), [(0.5, True), (0.55, False)])
def test_share_ranked_past_sixty_percent_reads_the_pairs_flipped_not_the_emptiest(
    share: float, named: bool
) -> None:
    """`_ranked_fullest` (review): five gateways; `a`, 65 % held, is the fullest as it
    is (0.80 against 0.78) and read emptier than `b` and `c` (0.73 against 0.77), but
    not than `e`, the emptiest (0.29), which "the emptiest as read" required. The pairs
    `a` wins as read, with `b` and `c`, are 46.7 % of the draw: a share of 50 % is
    within the tolerance of them; 55 % is not."""
    from gridroute.sim.compare import _ranked_fullest

    sites = [("a", 200, 130), ("b", 100, 75), ("c", 100, 75), ("e", 100, 20)]
    sc = _held_sites(sites, 60, 5)
    shares = {"a": share, "b": 0.05, "c": 0.05, "e": 0.9 - share}
    row = {"requests": 100_000, "shares": shares}
    assert _ranked_fullest(sc, ["a", "b", "c", "e"], "a", row, 60) is named


def _moved(
    sc: Scenario, diffs: list[SiteDiff], clients: int = 20, requests: int = 100_000
) -> list[str | None]:
    """How `diffs` read after `_moved_to_lower` (`requests` a policy, each policy's
    shares those the diffs give it)."""
    from gridroute.sim.compare import _moved_to_lower

    rows = {
        p: {"requests": requests, "shares": {d.site: d.shares[p] for d in diffs}}
        for p in ("gridroute", "saturation")
    }
    got = _moved_to_lower(sc, diffs, "gridroute", "saturation", clients, rows, 0.05)
    return [d.departure for d in got]


@pytest.mark.parametrize(("taker_held", "departure"), [(50, "counted_load"), (75, "unexplained")])
def test_a_loss_is_counted_load_only_where_its_taker_is_left_no_fuller(
    taker_held: int, departure: str
) -> None:
    """`_moved_to_lower`: one gateway moved 30 points from `l` (80 of 100 slots held
    from outside) to `t`, whose gain reads `counted_load`. The loss is the same rule
    where gridroute leaves `t` no fuller than `l` (0.64 against 0.86: picks moved toward
    the lower pressure). Where `t` is left fuller (0.89), a ranking read it emptier than
    it was, and the loss stays `unexplained`."""
    sc = _held_sites([("l", 100, 80), ("t", 100, taker_held)], 20)
    diffs = [
        SiteDiff("l", {"gridroute": 0.3, "saturation": 0.6}, _NO_OVER, -0.3, "unexplained"),
        SiteDiff("t", {"gridroute": 0.7, "saturation": 0.4}, _NO_OVER, 0.3, "counted_load"),
    ]
    assert _moved(sc, diffs) == [departure, "counted_load"]


@pytest.mark.parametrize(("other_held", "departure"), [(70, "counted_load"), (85, "unexplained")])
def test_a_loss_is_counted_load_only_where_no_site_gridroute_uses_is_left_fuller(
    other_held: int, departure: str
) -> None:
    """`_moved_to_lower`: as above (`l` left at 0.86, `t` at 0.64), with a third site
    `o` that gridroute sent 10 % to, as the seed did (no difference to judge there). A
    ranking that read `o` emptier than it was leaves it at 0.87, fuller than `l` and
    past the pairs it wins (none: it is the fullest); then `l`'s loss is not the
    pressure rule's and stays `unexplained` (review: world 545 with other load ranked
    at 0.6 of it). At 0.72 it is the loss side of `t`'s gain."""
    sc = _held_sites([("l", 100, 80), ("t", 100, 50), ("o", 100, other_held)], 20)
    diffs = [
        SiteDiff("l", {"gridroute": 0.3, "saturation": 0.6}, _NO_OVER, -0.3, "unexplained"),
        SiteDiff("t", {"gridroute": 0.6, "saturation": 0.3}, _NO_OVER, 0.3, "counted_load"),
        SiteDiff("o", {"gridroute": 0.1, "saturation": 0.1}, _NO_OVER, 0.0, None),
    ]
    assert _moved(sc, diffs) == [departure, "counted_load", None]


@pytest.mark.parametrize(("o_share", "departure"), [(0.04, "counted_load"), (0.1, "unexplained")])
def test_a_fuller_site_within_the_pairs_it_wins_does_not_keep_a_loss_unexplained(
    o_share: float, departure: str
) -> None:
    """`_moved_to_lower`: `l` (80 of 100 slots held) gave 30 points to `t` and `u`,
    left at 0.60 and 0.53 against the seed's 0.92 at `l`; `o`, 87 % held, is left
    fuller than `l` (0.88 against 0.86) with the share the seed gave it. The fullest
    site wins no pair, so 4 % is within the tolerance of its draw: a fuller site that
    takes no more than the pairs it wins is the seed's rule, and `l`'s loss is the
    other side of the gains (world 1069). At 10 % it took past its pairs, as a ranking
    that reads it emptier would, and the loss stays `unexplained`. `u`'s gain, within
    the tolerance, pays its part: `t`'s alone would not cover the loss."""
    sc = _held_sites([("l", 100, 80), ("t", 100, 50), ("u", 100, 50), ("o", 100, 87)], 20)
    t = 0.56 - o_share
    diffs = [
        SiteDiff("l", {"gridroute": 0.3, "saturation": 0.6}, _NO_OVER, -0.3, "unexplained"),
        SiteDiff("t", {"gridroute": t, "saturation": t - 0.26}, _NO_OVER, 0.26, "counted_load"),
        SiteDiff("u", {"gridroute": 0.14, "saturation": 0.1}, _NO_OVER, 0.04, None),
        SiteDiff("o", {"gridroute": o_share, "saturation": o_share}, _NO_OVER, 0.0, None),
    ]
    assert _moved(sc, diffs) == [departure, "counted_load", None, None]


@pytest.mark.parametrize(("a_share", "named"), [(0.75, {"a", "b", "c"}), (0.6, set())])
def test_seed_pairs_names_shares_between_the_draw_and_the_seeds(
    a_share: float, named: set[str]
) -> None:
    """`_seed_pairs`: three equal sites, `a` the emptiest, so it wins two pairs of three
    (66.7 %); the seed overshot `b` and `c` and, holding them out of its tier for a
    while after each, sent `a` 90 %. 75 % is between the draw's and the seed's: the
    seed's rule with `b` and `c` out of its tier part of the time, and the gains at
    `b` and `c` (and `a`'s loss) are named (worlds 253 and 1390). 60 % is past the draw
    away from the seed's share, what a ranking that read `b` and `c` emptier than they
    were would do, and nothing is named."""
    sites = [("a", 100, 40), ("b", 100, 80), ("c", 100, 80)]
    rest = (1.0 - a_share) / 2
    ours = {"a": a_share, "b": rest, "c": rest}
    ref = {"a": 0.9, "b": 0.05, "c": 0.05}
    assert _named_seed_pairs(sites, ours, ref, {"b", "c"}) == named


def test_a_fuller_site_in_a_group_of_every_site_keeps_a_loss_unexplained() -> None:
    """`_moved_to_lower` (review): three equal sites left at 0.60, 0.63 and 0.67 over
    2,000 requests, within the noise of each other one after the next, so one group:
    its draw is every request, which says nothing of what `o`, fuller than the losing
    `l`, may take. `l`'s loss stays `unexplained`."""
    sc = _held_sites([("t", 100, 15), ("l", 100, 33), ("o", 100, 42)], 100)
    diffs = [
        SiteDiff("t", {"gridroute": 0.45, "saturation": 0.15}, _NO_OVER, 0.3, "counted_load"),
        SiteDiff("l", {"gridroute": 0.3, "saturation": 0.6}, _NO_OVER, -0.3, "unexplained"),
        SiteDiff("o", {"gridroute": 0.25, "saturation": 0.25}, _NO_OVER, 0.0, None),
    ]
    assert _moved(sc, diffs, clients=100, requests=2_000) == ["counted_load", "unexplained", None]


@pytest.mark.parametrize(
    ("ours", "named"),
    [
        ({"a": 0.55, "b": 0.3, "c": 0.15}, set()),
        # within the tolerance of the draw everywhere: the rule as it was
        ({"a": 0.64, "b": 0.31, "c": 0.05}, {"a", "b", "c"}),
    ],
)
def test_seed_pairs_between_the_draw_and_the_seed_leans_to_the_emptier_sites(
    ours: dict[str, float], named: set[str]
) -> None:
    """`_drawn_or_toward_seed`: three sites of equal slots, `a` the emptiest (its
    pairs 2/3 of the draw), `c` the fullest (none); the seed overshot `a` and sent it
    35 %, `c` 20 %. Shares each between the draw's and the seed's, but `c` given 15 %
    where its pairs give it none and `a` 55 %, lean to the fuller site, what a ranking
    that reads `c` emptier than it is does (review: world 545 with all load not the
    gateway's own ranked at 0.6 of it): nothing is named. At the draw's shares the gain
    at `a` and the losses that paid it are named."""
    sites = [("a", 100, 40), ("b", 100, 60), ("c", 100, 90)]
    ref = {"a": 0.35, "b": 0.45, "c": 0.2}
    assert _named_seed_pairs(sites, ours, ref, {"a"}) == named


@pytest.mark.parametrize(
    ("ours", "named"),
    [
        ({"a": 0.75, "b": 0.22, "c": 0.03}, {"a", "b"}),
        ({"a": 0.70, "b": 0.23, "c": 0.07}, set()),
    ],
)
def test_seed_pairs_between_the_draw_and_the_seed_past_the_draws_tolerance(
    ours: dict[str, float], named: set[str]
) -> None:
    """`_drawn_or_toward_seed` past the draw's tolerance: three equal sites, the draw
    2/3, 1/3 and 0 (`a` emptiest); the seed overshot `b` and `c` and sent `a` 90 %.
    `a` at 75 % (8 points past its draw, toward the seed's) with `b` and `c` between
    theirs: the gain at `b` and `a`'s loss are named. `c` at 7 % where its pairs give
    none (between that and the seed's 3 %, within the tolerance) leans to the fuller
    site: `a` and `b` together 93 %, under their pairs' 100 % less the tolerance, and
    nothing is named."""
    sites = [("a", 100, 40), ("b", 100, 60), ("c", 100, 90)]
    ref = {"a": 0.9, "b": 0.07, "c": 0.03}
    assert _named_seed_pairs(sites, ours, ref, {"b", "c"}) == named


@pytest.mark.xfail(
    strict=True,
    reason="known limit (docs/selection.md, seed_pairs): a move between group-mates",
)
def test_seed_pairs_sees_a_misreading_between_sites_within_the_noise(  # type: ignore[no-untyped-def]
    monkeypatch,
) -> None:
    """World 253 with all load not a gateway's own ranked at 0.6 of it (the bench's
    `misread-outside:0.6`): the defect sends s0, 95 % held, 9.5 % where the sound
    ranking sends 5.7 % (the seed 2.7 %), and leaves it at 0.970 beside s1's 0.963,
    within the noise of each other: one group, inside which the draw says nothing of
    who wins. The group's share is between the draw's and the seed's, so the gain reads
    `seed_pairs`; it read `unexplained` before shares between the two were read (the
    move is 3.8 points, under one run's noise, so the bench does not count it)."""
    from gridroute.core import view

    saved = view.SiteView.__post_init__

    def misread(self: view.SiteView) -> None:
        saved(self)
        object.__setattr__(self, "ranked_others", self.ranked_others * 0.6)

    monkeypatch.setattr(view.SiteView, "__post_init__", misread)
    _, d = _judged(_outside(253), "s0")
    assert d.departure == "unexplained"


@pytest.mark.parametrize(
    ("gainer", "departure"),
    [((100, 80), "unexplained"), ((20, 11), "fair_share"), ((100, 60), "fair_share")],
)
def test_fair_share_is_not_a_loss_to_a_fuller_site_mostly_held_from_outside(
    gainer: tuple[int, int], departure: str
) -> None:
    """`_toward_fuller`: two gateways moved 10 points from `l` (50 of 100 slots held
    from outside, left at 0.82) to `g`. Budgets send a gateway held back at a site to
    the sites with room; a ranking that reads outside load as less than it is sends it
    to a fuller site mostly held from outside: `g` 80 % held, left at 0.88, and the
    loss is not `fair_share` (review of the harness: world 519 with the external-
    ranking fix undone). A fuller `g` at most 60 % held (20 slots, 11 held: 0.95) is
    the share ranking's, and an emptier one (0.68) is no sign of it: `fair_share`."""
    from gridroute.sim.compare import _compare

    slots, held = gainer
    sc = parse_scenario(
        {
            "sites": [
                {"name": "l", "slots": 100, "external": {"in_flight": 50}},
                {"name": "g", "slots": slots, "external": {"in_flight": held}},
            ],
            "clients": [40],
            "gateways": 2,
        }
    )

    def run(l_share: float) -> SimpleNamespace:
        shares = {"l": l_share, "g": 1.0 - l_share}
        return SimpleNamespace(row={"requests": 100_000, "overshoot": 0, "shares": shares})

    results = {"gridroute": run(0.8), "saturation": run(0.9)}
    c = _compare(sc, 40, results, BOTH, 0.05)  # type: ignore[arg-type]
    (d,) = [d for d in c.sites if d.site == "l"]
    assert d.departure == departure, c.as_dict()


_NO_OVER = {"gridroute": 0, "saturation": 0}


def _run_at_a(shares: dict[str, float], over: int) -> SimpleNamespace:
    """A run's result as `_compare` reads it: `shares` of 100,000 requests, `over`
    overshoots in all, every one at site `a`."""
    row = {"requests": 100_000, "overshoot": over, "shares": shares}
    return SimpleNamespace(row={**row, "overshoot_by_site": {"a": over}})


@pytest.mark.parametrize(
    ("gateways", "ours_over", "ref_over", "ranked"),
    [(5, 1, 5, True), (5, 3, 0, False), (1, 1, 5, False)],
)
def test_a_gain_the_share_ranking_reads_emptier_is_share_ranked_past_sixty_percent(
    gateways: int, ours_over: int, ref_over: int, ranked: bool
) -> None:
    """`_ranked_fullest`: `a` (200 slots, 65 % held from outside) took 20 points more
    than the seed and is left the fullest site as it is (0.89 against 0.86), but five
    gateways, each ranking the others' part of its 48 requests there about half way to
    whole, read it the emptiest (0.78 against 0.85 at `b` and `c`, 80 % held, ranked
    nearer whole): the share ranking's, by design. One gateway ranks no other
    gateway's load, reads the sites as they are, and has no such reason. Overshooting
    `a` more than the seed is never on purpose, whatever the reading. (gridroute
    overshot `a` once, as in world 670, so `counted_load`, which the gain from sites
    more held from outside would otherwise read first, does not name it.)"""
    from gridroute.sim.compare import _compare, _ranked_fullest, _ranked_last

    sc = _held_sites([("a", 200, 130), ("b", 100, 80), ("c", 100, 80)], 60, gateways)

    def run(a: float, over: int) -> SimpleNamespace:
        return _run_at_a({"a": a, "b": (1.0 - a) / 2, "c": (1.0 - a) / 2}, over)

    results = {"gridroute": run(0.8, ours_over), "saturation": run(0.6, ref_over)}
    reads = _ranked_fullest(sc, ["a", "b", "c"], "a", results["gridroute"].row, 60)
    assert reads is (gateways > 1)
    c = _ranked_last(sc, _compare(sc, 60, results, BOTH, 0.05), BOTH)  # type: ignore[arg-type]
    (d,) = [d for d in c.sites if d.site == "a"]
    assert (d.departure == "share_ranked") is ranked, c.as_dict()


def test_share_ranked_past_sixty_percent_needs_the_pairs_it_reads_itself_winning() -> None:
    """Review of `_ranked_fullest`: beside `b` and `c` 60 % held (read at 0.63, where
    five gateways read `a` at 0.78), a site `d` nearly full from outside that gridroute
    barely uses reads near its held fraction (0.88). "Not the fullest as read" would
    then name any gain at `a`; the pairs `a` wins as read (against `d` alone) are 23 %
    of the draw, not its 80 %, so its gain is not the share ranking's."""
    from gridroute.sim.compare import _compare, _ranked_fullest, _ranked_last

    sites = [("a", 200, 130), ("b", 100, 60), ("c", 100, 60), ("d", 100, 88)]
    sc = _held_sites(sites, 60, 5)
    ours = {"a": 0.8, "b": 0.0995, "c": 0.0995, "d": 0.001}
    results = {
        "gridroute": _run_at_a(ours, 1),
        "saturation": _run_at_a({"a": 0.6, "b": 0.2, "c": 0.2, "d": 0.0}, 5),
    }
    assert not _ranked_fullest(sc, ["a", "b", "c", "d"], "a", results["gridroute"].row, 60)
    c = _ranked_last(sc, _compare(sc, 60, results, BOTH, 0.05), BOTH)  # type: ignore[arg-type]
    (d,) = [d for d in c.sites if d.site == "a"]
    assert d.departure != "share_ranked", c.as_dict()


def test_share_ranked_past_sixty_percent_reads_overshoot_over_every_stream() -> None:
    """Review of `_ranked_last`: where `_confirm` ran more streams, the overshoot guard
    reads their totals, not the scenario's own stream (as noisy as its shares): a site
    gridroute overshot less on its own stream but more over all of them is not named."""
    from dataclasses import replace

    from gridroute.sim.compare import Comparison, SiteDiff, _ranked_last

    sc = _held_sites([("a", 200, 130), ("b", 100, 80), ("c", 100, 80)], 60, 5)
    shares = {"a": 0.8, "b": 0.1, "c": 0.1}
    rows = {
        p: {"requests": 100_000, "overshoot": 0, "shares": shares}
        for p in ("gridroute", "saturation")
    }
    own = {"gridroute": 1, "saturation": 5}
    gain = SiteDiff("a", {"gridroute": 0.8, "saturation": 0.6}, own, 0.2, "unexplained")
    calm = Comparison(60, rows, [gain])
    assert _ranked_last(sc, calm, BOTH).sites[0].departure == "share_ranked"
    worse = replace(gain, stream_overshoot={"gridroute": 30, "saturation": 12})
    loud = Comparison(60, rows, [worse])
    assert _ranked_last(sc, loud, BOTH).sites[0].departure == "unexplained"


@pytest.mark.parametrize(("gateways", "departure"), [(4, "knock_on"), (2, "unexplained")])
def test_a_gain_beside_a_site_the_floors_leave_unused_is_knock_on(
    gateways: int, departure: str
) -> None:
    """`_floored_other`: two sites with room; `s` has 3 free slots, and gridroute sent
    it nothing (the seed overshot it). With 4 equal gateways each one's part of those
    slots is 0.75, floored to none while `b` has room, so `b`'s gain is the knock-on of
    that loss. With 2, each part is 1.5 slots: a whole budget there that gridroute left
    unused is not the floors', and the gain stays `unexplained`."""
    from gridroute.sim.compare import _floored_other

    spec = {
        "sites": [
            {"name": "s", "slots": 7, "external": {"in_flight": 4}},
            {"name": "b", "slots": 100, "external": {"in_flight": 70}},
        ],
        "clients": [10],
        "gateways": gateways,
    }
    sc = parse_scenario(spec)
    diffs = [
        SiteDiff("s", {"gridroute": 0.0, "saturation": 0.2}, _NO_OVER, -0.2, "seed_overshoots"),
        SiteDiff("b", {"gridroute": 1.0, "saturation": 0.8}, _NO_OVER, 0.2, "unexplained"),
    ]
    got = _floored_other(sc, ["s", "b"], diffs, "gridroute", 10, 0.05)
    assert [d.departure for d in got] == ["seed_overshoots", departure]


@pytest.mark.parametrize(("world_id", "site"), [(146, "s1"), (233, "s5")])
def test_stream_noise_names_a_difference_of_one_request_stream(  # type: ignore[no-untyped-def]
    monkeypatch, world_id: int, site: str
) -> None:
    """Differences of one request stream that the policies' means over eight do not
    keep, with other gateways' load ranked at the share alone (as before
    `OUTSIDE_RANKED_WHOLE_FROM`, which brought both within 5 points): 146 s1 +7.5
    points on the world's own stream, -0.7 +- 1.8 on average (-8.1 to +7.5); 233 s5
    +9.3, +1.3 +- 1.6, and gridroute overshot it 5 times to the seed's none on the
    world's own stream, 23 to 423 over the eight."""
    from gridroute.core import view

    monkeypatch.setattr(view, "OUTSIDE_RANKED_WHOLE_FROM", 0.9999)
    sc = _outside(world_id)
    c, d = _judged(sc, site)
    assert d.departure == "stream_noise" and len(d.streams) == 8, c.as_dict()


@pytest.mark.xfail(
    strict=True,
    reason="open (issue 23): docs/selection.md, 'Where gridroute departs from the seed rule', Open",
)
@pytest.mark.parametrize(
    ("world_id", "site"),
    [
        (213, "s2"),  # fractions at a small site shared by 7 gateways
        # its loss went to the fuller site, 84 % held (`_toward_fuller`)
        (213, "s0"),
        # the seed collapsed (2,959 requests to 6,108); the site left the fullest (0.988),
        # 34 % where its level share is 28 % (the seed 17 %)
        (333, "s0"),
        # floors and capacity-weighted pairs with 9 clients: 36 % where the level share is
        # 50 % (s0's gain is `level`)
        (599, "s2"),
        # the three sites with room within the noise of each other (one group: the draw
        # says nothing of any one); the seed overshot s0 and s4 and held them out.
        # gridroute is at the level (8.9 and 87.0 % against 8.3 and 88.4 %), but the
        # seed's pairs cannot reach it, and s0's scrape failed for 4 s (long enough to be
        # judged silent), so no level is read
        (1262, "s0"),
        (1262, "s2"),
        # Worlds 960-1439, run first at the second stop of 2026-12-07 (out of sample):
        # the share ranking's discount, 7 gateways: a large site left the emptiest, 4.8 %
        # where its level share is 20.0 % (the seed 22.0 %)
        (1331, "s3"),
        # s0, half empty, read queued for the 5 s lookback; the two-site formula between s2
        # and s3 gives the larger s3 more, left the fullest where the seed collapsed (44 %,
        # level 27 %)
        (1378, "s3"),
    ],
)
def test_open_departures_past_the_harness_worlds(world_id: int, site: str) -> None:
    """Generated worlds past `bench/bench_differential.py`'s 120 (to 1439) where a
    site's share still differs from the seed's with no rule naming why. Each is
    expected to fail until the policy (or a rule the docs can defend) explains it; a
    pass fails the suite, so the fix is seen and the entry moves to the named
    regressions above."""
    sc = _outside(world_id)
    c, d = _judged(sc, site)
    assert d.departure != "unexplained", c.as_dict()


@pytest.mark.parametrize(("ours_over", "departure"), [(0, "stream_noise"), (9, "unexplained")])
def test_stream_noise_needs_no_more_overshoot_over_every_stream(  # type: ignore[no-untyped-def]
    monkeypatch, ours_over: int, departure: str
) -> None:
    """Run on more streams, a site whose shares agree there is `stream_noise` only where
    gridroute overshot it no more than the reference over all of them, the world's own
    included: equal shares do not excuse overshooting a site more."""
    from gridroute.sim import compare as cmp

    def run(sc, policy, clients):  # type: ignore[no-untyped-def]
        over = ours_over if policy is Policy.GRIDROUTE else 1
        row = {"shares": {"a": 0.5, "b": 0.5}, "overshoot_by_site": {"a": over, "b": 0}}
        return SimpleNamespace(run=lambda: SimpleNamespace(row=row))

    monkeypatch.setattr(cmp, "SimRun", run)
    sc = parse_scenario({"sites": [{"name": "a", "slots": 8}, {"name": "b", "slots": 8}]})
    first = cmp.SiteDiff(
        "a", {"gridroute": 0.56, "saturation": 0.5}, {"gridroute": 2, "saturation": 0},
        0.06, cmp.UNEXPLAINED,
    )  # fmt: skip
    c = cmp.Comparison(16, {}, [first])
    (d,) = cmp._confirm(sc, c, BOTH, cmp.TOLERANCE, 7).sites
    assert d.departure == departure and len(d.streams) == 8, d


def test_level_sees_a_defect_leave_a_site_mostly_held_from_outside_the_fullest(  # type: ignore[no-untyped-def]
    monkeypatch,
) -> None:
    """World 1706 (8 gateways, the seed's run collapsed) with the external-ranking fix
    undone: s0, 84 % held from outside, takes 20.2 % where the sound ranking sends it
    14.7 % and its level share is 15.9 %, and is left the fullest site with room (0.99
    beside 0.93-0.97): the defect's mark, which `_fullest` keeps from `seed_overshoots`.
    It is 4.3 points past the level, within the tolerance, and a first `level`, which
    read the level without asking whether the seed's pairs reach it, named it (review).
    They do not reach it here, so the rule reads nothing and s0 stays `unexplained`."""
    from gridroute.core import gridstate

    monkeypatch.setattr(gridstate, "_apportion", lambda external, unreported: {})
    c, d = _judged(_outside(1706), "s0")
    assert d.departure == "unexplained", c.as_dict()


def test_level_shares_fill_the_emptiest_sites_to_one_pressure() -> None:
    """`level_shares`: 30 clients over sites 40, 60 and 90 % held fill the first two to
    0.65 (25 and 5 clients); the third, past that from outside, takes none. With no
    clients every share is none."""
    from gridroute.sim.compare import level_shares

    sc = _held_sites([("a", 100, 40), ("b", 100, 60), ("c", 100, 90)], 30)
    got = level_shares(sc, ["a", "b", "c"], 30)
    assert got == {"a": pytest.approx(25 / 30), "b": pytest.approx(5 / 30), "c": 0.0}
    assert level_shares(sc, ["a", "b", "c"], 0) == {"a": 0.0, "b": 0.0, "c": 0.0}


def _level_case(
    sites: list[tuple[str, int, int]],
    clients: int,
    ours: float,
    ref: float,
    over: tuple[int, int] = (0, 0),
) -> str | None:
    """How `_at_level` reads a difference at the first site left `unexplained`, gridroute
    sending it `ours` and the reference `ref` (the rest spread evenly over the others),
    `over` overshoots there each over every stream run."""
    from gridroute.sim.compare import Comparison, _at_level

    sc = _held_sites(sites, clients)
    first, *rest = [n for n, _, _ in sites]
    rows = {}
    for policy, share in (("gridroute", ours), ("saturation", ref)):
        shares = {first: share, **{n: (1.0 - share) / len(rest) for n in rest}}
        rows[policy] = {"requests": 100_000, "overshoot": 0, "shares": shares}
    counts = {"gridroute": over[0], "saturation": over[1]}
    shares = {"gridroute": ours, "saturation": ref}
    d = SiteDiff(first, shares, _NO_OVER, ours - ref, "unexplained", (0.1, 0.1), counts)
    (got,) = [x for x in _at_level(sc, Comparison(clients, rows, [d]), BOTH).sites]
    return got.departure


@pytest.mark.parametrize(
    ("ours", "ref", "over", "departure"),
    [
        (0.30, 0.15, (0, 0), "level"),  # at the level (1/3), the seed further
        (0.38, 0.25, (0, 0), "level"),  # 4.7 points over; the seed 8.3 under
        (0.38, 0.30, (0, 0), "unexplained"),  # the seed within the tolerance of it
        (0.36, 0.30, (0, 0), "unexplained"),  # 2.7 over, the seed 3.3 under
        (0.39, 0.20, (0, 0), "unexplained"),  # 5.7 points past the level
        (0.30, 0.15, (3, 1), "unexplained"),  # overshot more over the streams
    ],
)
def test_level_names_a_share_within_the_tolerance_of_the_level_the_seed_is_past(
    ours: float, ref: float, over: tuple[int, int], departure: str
) -> None:
    """`_at_level`: three equal sites 70 % held, 45 clients (level: a third each, at
    0.85). gridroute's share at the level or within 5 points of it, the seed's past 5
    points from it, is `level`; a share past the tolerance from the level, a seed's
    share within it (review: one 0.1 point further was enough), or more overshoot than
    the seed's over every stream run is not."""
    sites = [("a", 100, 70), ("b", 100, 70), ("c", 100, 70)]
    assert _level_case(sites, 45, ours, ref, over) == departure


def test_level_leaves_two_sites_and_past_capacity_to_their_own_rules() -> None:
    """Two sites with room: the seed's rule there is its two-site formula, which does
    not aim at one pressure. Past capacity every site is full: `past_capacity`'s."""
    two = [("a", 100, 70), ("b", 100, 70), ("c", 100, 100)]
    assert _level_case(two, 45, 0.5, 0.3) == "unexplained"
    three = [("a", 100, 70), ("b", 100, 70), ("c", 100, 70)]
    assert _level_case(three, 95, 1 / 3, 0.15) == "unexplained"


def test_level_names_599s_gain_and_not_its_loss() -> None:
    """World 599 (9 clients): s0's gain is at the level (44 %, level 42 %, the seed
    23 %); s2's loss is not (36 %, level 50 %): it stays open."""
    c, d = _judged(_outside(599), "s0")
    assert d.departure == "level", c.as_dict()
    assert [x.site for x in c.unexplained] == ["s2"], c.as_dict()


def test_level_is_read_only_where_nothing_in_the_scenario_moves_it() -> None:
    """`_level`: three equal sites 70 % held, 45 clients: a third each. A scrape failing
    for 1 s leaves the site live (with a scrape interval either side and a poll, 4 s,
    within the 5 s freshness window); for 4 s it may be judged silent, and no level is
    read. Neither is a partition, outside load that steps in the measured span, a site
    that serves at another speed, or a failure at a site without room."""
    from gridroute.sim.compare import _level

    sites = [{"name": n, "slots": 100, "external": {"in_flight": 70}} for n in "abc"]
    base = {"sites": sites, "clients": [45], "duration_s": 12.0, "warmup_s": 3.0}
    room = ["a", "b", "c"]
    third = {n: pytest.approx(1 / 3) for n in room}
    assert _level(parse_scenario(base), room, 45) == third
    brief = {"metrics_down": "a", "at_s": 4.0, "until_s": 5.0}
    assert _level(parse_scenario({**base, "events": [brief]}), room, 45) == third
    down = {**brief, "until_s": 8.0}
    assert _level(parse_scenario({**base, "events": [down]}), room, 45) is None
    cut = {"partition": "a", "at_s": 4.0, "until_s": 8.0}
    assert _level(parse_scenario({**base, "events": [cut]}), room, 45) is None
    stepped = {**sites[0], "external": {"in_flight": 70, "steps": [{"at_s": 6.0, "in_flight": 20}]}}
    assert _level(parse_scenario({**base, "sites": [stepped, *sites[1:]]}), room, 45) is None
    slow = {**sites[0], "service_scale": 2.0}
    assert _level(parse_scenario({**base, "sites": [slow, *sites[1:]]}), room, 45) is None
    full = {"name": "d", "slots": 10, "external": {"in_flight": 10}}
    gone = {**down, "metrics_down": "d"}
    sc = parse_scenario({**base, "sites": [*sites, full], "events": [gone]})
    assert _level(sc, room, 45) == third


def test_level_is_read_only_where_the_seeds_pairs_can_reach_it() -> None:
    """`_reachable` (review): 30 clients over sites 40, 60 and 90 % held level the first
    two at 0.65, `a` taking 83 %; a request goes to a site of its pair, and the pairs
    with `a` are two thirds of the draw, so the seed's rule cannot give it that, and no
    level is read (the simulator's seed gives it 67 %). With `a` 55 % held the level
    gives it 58 %, within its pairs; two sites the level leaves empty, drawn together,
    send one of them a request, so no level either."""
    from gridroute.sim.compare import _level, _reachable, level_shares

    def held(*levels: int) -> Scenario:
        return _held_sites([(n, 100, h) for n, h in zip("abcd", levels, strict=False)], 30)

    room = ["a", "b", "c"]
    sc = held(40, 60, 90)
    assert not _reachable(sc, room, level_shares(sc, room, 30))
    assert _level(sc, room, 30) is None
    sc = held(55, 60, 90)
    assert level_shares(sc, room, 30)["a"] == pytest.approx(17.5 / 30)
    assert _reachable(sc, room, level_shares(sc, room, 30))
    sc = held(40, 60, 90, 90)
    four = [*room, "d"]
    assert not _reachable(sc, four, level_shares(sc, four, 30))


@pytest.mark.parametrize(
    ("world_id", "site", "clients", "availability", "floored"),
    [
        (2048, "s0", 4, {}, True),  # 1 client of 4 at each busy gateway: 0.75 of a slot
        # 2 clients at 2 of 6 gateways: 1.5 slots each, which the nominal split (0.31 of
        # the clients at most, 0.92 of a slot) misread as floored (review)
        (2048, "s0", 2, {}, False),
        (2048, "s0", 4, {"fair_share": False}, False),  # no budgets, no floors
        (497, "s1", 3, {}, False),  # 3 clients over 8 gateways: a third of 4 free slots
        (2048, "s0", 200, {}, False),  # past capacity
    ],
)
def test_the_floors_are_read_on_the_clients_each_gateway_holds(
    world_id: int, site: str, clients: int, availability: dict[str, bool], floored: bool
) -> None:
    """`compare._floored` names a loss toward a fuller site only where the budgets'
    floors explain it, read on the clients as the run splits them over the gateways."""
    from gridroute.sim.compare import _floored

    spec = harness_world("outside", world_id)
    spec["clients"] = [clients]
    spec["availability"] = availability
    assert _floored(parse_scenario(spec), site, 0.0, clients) is floored


@pytest.mark.parametrize("clients", [4, 12, 16])
def test_the_floors_keep_gateways_off_a_small_sites_last_slots(clients: int) -> None:
    """World 2048 (two sites: 3 free slots of 8 beside 16 of 153, 90 % held; 6
    gateways), run at more clients than the harness draws. Each gateway's part of the
    small site's free slots is half a slot, floored to none (`GridState._whole`), so no
    gateway sends there on a poll-old reading that every other gateway shares. A split
    that borrowed it as the seed's two-site rule does (tried and reverted, BENCHMARKS.md)
    overshot it 15 times at 16 clients on this stream and served fewer than the seed
    (721 to 731): gridroute must overshoot no more than the seed and serve no fewer."""
    spec = harness_world("outside", 2048)
    spec["clients"] = [clients]
    (c,) = compare(parse_scenario(spec), BOTH)
    ours, seed = c.rows["gridroute"], c.rows["saturation"]
    assert ours["overshoot"] <= seed["overshoot"], c.as_dict()
    assert ours["requests"] >= seed["requests"], c.as_dict()
