"""Pressure tiers, picks and exclusions (site-selection.txt "Site choice"; issue 2 rules 2-4, 7)."""

from collections import Counter
from random import Random

import pytest

from gridroute.core import AvailabilitySettings, Health, Outcome, Path, Policy, decide

from .grid_builder import MODEL, Grid, Site

POLICIES = [Policy.SATURATION, Policy.GRIDROUTE]


def _sites(snap, policy, n=2000, seed=1, **kw) -> Counter[str]:
    rng = Random(seed)
    c: Counter[str] = Counter()
    for _ in range(n):
        d = decide(snap, MODEL, rng, policy, **kw)
        c[d.view.site if d.view else d.outcome.value] += 1
    return c


@pytest.mark.parametrize("policy", POLICIES)
def test_queue_free_sites_with_room_come_before_queued_sites_with_room(policy: Policy) -> None:
    """'Selection prefers queue-free sites with room, then queued sites with room'."""
    g = Grid(
        [
            Site("queued", running=10, waiting=0.5, ready=2, max_running=100),
            Site("free", running=60, waiting=0, max_running=100),
        ]
    )
    assert _sites(g.refresh(1.0), policy) == {"free": 2000}


@pytest.mark.parametrize("policy", POLICIES)
def test_queued_sites_with_room_come_before_sites_without_room(policy: Policy) -> None:
    # Half a request waiting per endpoint: queued, but not a backlog that teaches a limit.
    g = Grid(
        [
            Site("full", running=100, waiting=0, max_running=100),
            Site("queued", running=10, waiting=0.5, ready=2, max_running=100),
        ]
    )
    assert _sites(g.refresh(1.0), policy) == {"queued": 2000}


@pytest.mark.parametrize("policy", POLICIES)
def test_without_room_sites_not_marked_full_come_first(policy: Policy) -> None:
    """'then sites not marked full. If none remain, all healthy sites are eligible.'"""
    s = AvailabilitySettings(full_after_ms=0)
    g = Grid(
        [
            Site("full", running=100, waiting=5, max_running=100),
            Site("busy", running=100, waiting=0, max_running=100),
        ],
        s,
    )
    snap = g.refresh(1.0)
    assert snap.views[0].full and not snap.views[1].full
    assert _sites(snap, policy) == {"busy": 2000}
    d = decide(snap, MODEL, Random(1), policy)
    assert d.path is Path.QUEUE_TIE
    assert ("full", "full") in d.refused


@pytest.mark.parametrize("policy", POLICIES)
def test_when_all_are_full_every_healthy_site_is_eligible_tied_on_least_queue(
    policy: Policy,
) -> None:
    """'Queue-only and saturated selection retain sites tied on the least queue depth'."""
    s = AvailabilitySettings(full_after_ms=0)
    g = Grid(
        [
            Site("a", running=100, waiting=9, max_running=100),
            Site("b", running=100, waiting=3, max_running=100),
            Site("c", running=100, waiting=3, max_running=50),
        ],
        s,
    )
    snap = g.refresh(1.0)
    c = _sites(snap, policy, n=3000)
    assert set(c) == {"b", "c"}
    assert decide(snap, MODEL, Random(1), policy).path is Path.SATURATED


@pytest.mark.parametrize("policy", POLICIES)
def test_three_sites_draw_two_by_capacity_and_take_the_lower_rho(policy: Policy) -> None:
    """'With three or more sites, it draws two by capacity and takes the lower rho.'"""
    # One gateway that sent none of this load: no fair-share budget applies here.
    s = AvailabilitySettings(fair_share=False)
    g = Grid([Site("a", running=90), Site("b", running=10), Site("c", running=50)], s)
    snap = g.refresh(1.0)
    c = _sites(snap, policy, n=6000)
    # The busiest site wins no pair; the idlest wins every pair it is drawn into (2/3).
    assert c["a"] == 0
    assert c["b"] == pytest.approx(4000, rel=0.06)
    assert decide(snap, MODEL, Random(2), policy).path is Path.PRESSURE_P2C


@pytest.mark.parametrize("policy", POLICIES)
def test_two_sites_weigh_capacity_over_one_plus_rho(policy: Policy) -> None:
    """'With two, weights are capacity over 1 + rho'."""
    g = Grid([Site("a", running=0, max_running=300), Site("b", running=50, max_running=100)])
    for _ in range(50):  # the load at b is this gateway's own (gridroute reads own counts)
        g.own.start("b/p", 0.5)
    snap = g.refresh(1.0)
    expected = (300 / 1.0) / (300 / 1.0 + 100 / 1.5)
    c = _sites(snap, policy, n=20000, own=g.own.counts)
    assert c["a"] / 20000 == pytest.approx(expected, abs=0.015)
    assert decide(snap, MODEL, Random(1), policy).path is Path.PRESSURE_WEIGHTED


@pytest.mark.parametrize("policy", POLICIES)
def test_two_site_shares_are_clamped_to_ten_ninety(policy: Policy) -> None:
    """'with each share bounded to 10–90 percent'."""
    s = AvailabilitySettings(explore_floor=0)
    g = Grid([Site("a", running=0, max_running=1000), Site("b", running=0, max_running=10)], s)
    c = _sites(g.refresh(1.0), policy, n=20000)
    assert c["b"] / 20000 == pytest.approx(0.1, abs=0.01)


@pytest.mark.parametrize("policy", POLICIES)
def test_one_site_with_room_is_taken(policy: Policy) -> None:
    g = Grid([Site("a", running=100), Site("b", running=10)])
    d = decide(g.refresh(1.0), MODEL, Random(1), policy)
    assert d.view is not None and d.view.site == "b" and d.path is Path.SINGLE


def test_unknown_capacity_counts_as_the_mean_known_capacity() -> None:
    """'Unknown capacity receives the mean known capacity'."""
    g = Grid([Site("a", max_running=100), Site("b", max_running=300), Site("u", max_running=None)])
    plan = g.refresh(1.0).plan(MODEL)
    assert plan is not None and plan.weights["u/p"] == 200


def test_all_capacities_unknown_weigh_equally() -> None:
    """'or equal weights when all capacities are unknown'."""
    g = Grid([Site("a", max_running=None), Site("b", max_running=None)])
    plan = g.refresh(1.0).plan(MODEL)
    assert plan is not None and plan.weights == {"a/p": 1.0, "b/p": 1.0}


def test_unready_sites_are_never_chosen() -> None:
    """'Selection excludes unready sites.'"""
    g = Grid([Site("down", running=0, ready=0), Site("up", running=99)])
    snap = g.refresh(1.0)
    for policy in Policy:
        assert _sites(snap, policy, n=200) == {"up": 200}
    g2 = Grid([Site("down", ready=0)])
    d = decide(g2.refresh(1.0), MODEL, Random(1))
    assert d.outcome is Outcome.NO_SITE
    assert ("down", "unready") in d.refused


def test_a_demoted_site_is_only_a_last_resort() -> None:
    """'A site demoted by gateway health checks is a last resort if it remains admitted.'"""
    g = Grid([Site("sick", running=0), Site("busy", running=100, waiting=4)])
    snap = g.refresh(1.0, health={"sick/p": Health.DOWN})
    assert _sites(snap, Policy.GRIDROUTE, n=200) == {"busy": 200}
    g2 = Grid([Site("sick")])
    d = decide(g2.refresh(1.0, health={"sick/p": Health.DOWN}), MODEL, Random(1))
    assert d.view is not None and d.path is Path.LAST_RESORT


def test_health_unknown_does_not_demote() -> None:
    """Demotion waits until the first probe results are in."""
    g = Grid([Site("a", running=0), Site("b", running=90)])
    snap = g.refresh(1.0, health={"a/p": Health.UNKNOWN})
    assert _sites(snap, Policy.GRIDROUTE, n=100)["a"] > 0


def test_signals_and_health_down_everywhere_tries_the_front_candidate() -> None:
    """'While both are down on every site, the front candidate is tried as a last resort.'"""
    g = Grid([Site("front"), Site("back")])
    g.refresh(1.0)
    snap = g.refresh(30.0, sampled_at=1.0, health={"front/p": Health.DOWN, "back/p": Health.DOWN})
    d = decide(snap, MODEL, Random(3))
    assert d.path is Path.LAST_RESORT


def test_entirely_missing_telemetry_is_a_fallback() -> None:
    """'Entirely missing telemetry stays a fallback.'"""
    g = Grid([Site("a", measured=False), Site("b", measured=False)])
    d = decide(g.refresh(1.0), MODEL, Random(1))
    assert d.outcome is Outcome.ROUTE and d.path is Path.FALLBACK


def test_unmeasured_candidates_take_no_overflow() -> None:
    """'One that does not publish load is unmeasured, takes no overflow'."""
    g = Grid([Site("dark", measured=False), Site("busy", running=100, waiting=8)])
    snap = g.refresh(1.0)
    assert _sites(snap, Policy.GRIDROUTE, n=300) == {"busy": 300}
    assert ("dark", "unmeasured") in decide(snap, MODEL, Random(1)).refused


def test_affinity_narrows_only_within_the_chosen_tier() -> None:
    """'Affinity narrows only within the selected tier.'"""
    g = Grid([Site("a", running=10), Site("b", running=20), Site("c", running=100, waiting=3)])
    snap = g.refresh(1.0)
    d = decide(snap, MODEL, Random(1), affinity="b/p")
    assert d.view is not None and d.view.site == "b" and d.path is Path.AFFINITY
    d = decide(snap, MODEL, Random(1), affinity="c/p")  # c is in a worse tier
    assert d.view is not None and d.view.site != "c"


def test_unknown_model_is_refused() -> None:
    g = Grid([Site("a")])
    assert decide(g.refresh(1.0), "other", Random(1)).outcome is Outcome.UNKNOWN_MODEL


def test_first_takes_the_front_healthy_candidate() -> None:
    g = Grid([Site("hub", running=100, waiting=50), Site("west", running=0)])
    d = decide(g.refresh(1.0), MODEL, Random(1), Policy.FIRST)
    assert d.view is not None and d.view.site == "hub" and d.path is Path.FIRST


def test_exclude_sends_a_retry_elsewhere() -> None:
    g = Grid([Site("a", running=0), Site("b", running=50)])
    d = decide(g.refresh(1.0), MODEL, Random(1), exclude=frozenset({"a/p"}))
    assert d.view is not None and d.view.site == "b"


def test_paths_and_reasons_are_bounded_label_values() -> None:
    """Every decision's path and reasons come from small fixed sets (metric labels)."""
    from gridroute.core import Path as P
    from gridroute.core import Reason as R

    assert {p.value for p in P} == {
        "pressure_p2c",
        "pressure_weighted",
        "single",
        "capacity",
        "queue_tie",
        "saturated",
        "affinity",
        "prefix",
        "borrow",
        "first",
        "overlay",
        "fallback",
        "last_resort",
        "shed",
        "hold",
        "none",
    }
    assert {r.value for r in R} == {"unready", "silent", "unmeasured", "demoted", "full", "shed"}


def test_no_site_carries_a_retry_after() -> None:
    g = Grid([Site("down", ready=0)])
    d = decide(g.refresh(1.0), MODEL, Random(1))
    assert d.outcome is Outcome.NO_SITE and d.retry_after_s in {3, 4, 5, 6, 7}


def test_first_falls_back_to_the_front_candidate_not_a_draw() -> None:
    """The ranked-first path takes the front of a local-first order when nothing ranks."""
    g = Grid([Site("hub", measured=False, max_running=1), Site("west", measured=False)])
    snap = g.refresh(1.0)
    assert {decide(snap, MODEL, Random(s), Policy.FIRST).view.site for s in range(50)} == {"hub"}  # type: ignore[union-attr]


def test_view_exposes_counted_and_pick_rho() -> None:
    g = Grid([Site("a", running=60, max_running=100)])
    for _ in range(20):
        g.own.start("a/p", 0.5)
    v = g.refresh(1.0).views[0]
    assert v.base == 40 and v.share == pytest.approx(20 / 60)
    assert v.counted_rho(25) == pytest.approx(0.65)
    assert v.pick_rho(25) == pytest.approx((25 + 40 * 20 / 60) / 100)
