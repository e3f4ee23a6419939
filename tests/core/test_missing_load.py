"""Missing is unknown, never zero (issue 11): a candidate without an in-flight reading has
no room and no rho; a failed scrape silences a site one window after its last load."""

from collections import Counter
from random import Random

import pytest

from gridroute.core import AvailabilitySettings, Health, Live, Path, Policy, Sample, decide

from .grid_builder import MODEL, Grid, Site

POLICIES = [Policy.SATURATION, Policy.GRIDROUTE]


def _sites(snap, policy, n=2000, seed=1) -> Counter[str]:
    rng = Random(seed)
    c: Counter[str] = Counter()
    for _ in range(n):
        d = decide(snap, MODEL, rng, policy)
        c[d.view.site if d.view else d.outcome.value] += 1
    return c


def _readiness_only(site: str, at: float) -> Sample:
    """What an operator publishes for a provider whose scrape just failed."""
    return Sample(site, "p", at, ready=1.0, max_running=100.0)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_candidate_without_an_in_flight_reading_has_no_room(policy: Policy) -> None:
    g = Grid([Site("blind", running=None), Site("busy", running=70)])
    snap = g.refresh(1.0)
    blind = snap.view("blind/p")
    assert blind is not None and blind.measured and not blind.loaded and blind.rho is None
    assert _sites(snap, policy) == {"busy": 2000}


@pytest.mark.parametrize("policy", POLICIES)
def test_every_candidate_without_rho_is_drawn_by_capacity(policy: Policy) -> None:
    """'Missing rho uses capacity-weighted selection.'"""
    g = Grid([Site("a", running=None, max_running=300), Site("b", running=None, max_running=100)])
    snap = g.refresh(1.0)
    c = _sites(snap, policy, n=20000)
    assert c["a"] / 20000 == pytest.approx(0.75, abs=0.015)
    d = decide(snap, MODEL, Random(1), policy)
    assert d.path is Path.CAPACITY
    assert d.view is not None
    assert all(site != d.view.site for site, _ in d.refused)


def test_a_blind_site_beside_a_full_one_takes_overflow_only_by_the_queue_rule() -> None:
    """With a known-full site and an unknown one, nothing holds or sheds on a guess."""
    s = AvailabilitySettings(max_queue_ms=1000, shedding=True, full_after_ms=0)
    g = Grid([Site("full", running=100, waiting=5), Site("blind", running=None)], s)
    snap = g.refresh(1.0)
    d = decide(snap, MODEL, Random(1), Policy.GRIDROUTE)
    assert d.view is not None and d.view.site == "blind"
    assert ("full", "full") in d.refused and not any(site == "blind" for site, _ in d.refused)


def test_a_failed_scrape_keeps_the_last_load_then_silences_after_the_window() -> None:
    """'A failed scrape makes the site silent after the window, not idle in between.'"""
    g = Grid([Site("sick", running=100, waiting=0), Site("other", running=60)])
    for t in (1.0, 2.0, 3.0):
        g.refresh(t)
    sick = g.sites[0]
    other = g.sites[1]
    seen: list[tuple[float, Live | None, bool]] = []
    for t in (4.0, 5.0, 6.0, 7.0, 8.0, 8.5, 9.0):
        snap = g.state.refresh(
            [_readiness_only(sick.name, t), g.sample(other, t)],
            {"sick": t, "other": t},
            t,
            {},
            g.own,
        )
        v = snap.view("sick/p")
        assert v is not None
        seen.append((t, v.live, v.loaded))
        # While live it still reads full at its last load: never a pick.
        assert _sites(snap, Policy.GRIDROUTE, n=200) == {"other": 200}
        assert _sites(snap, Policy.SATURATION, n=200) == {"other": 200}
    live_until = max(t for t, live, _ in seen if live is Live.LIVE)
    assert live_until == 8.0  # last load at 3.0 + the 5 s window
    assert all(live is Live.SILENT for t, live, _ in seen if t > 8.0)


def test_readiness_only_samples_do_not_wipe_learned_ceilings() -> None:
    s = AvailabilitySettings()
    g = Grid([Site("a", running=150, waiting=0, max_running=100)], s)
    g.refresh(1.0)
    before = g.refresh(2.0).view("a/p")
    assert before is not None and before.soft == 150
    snap = g.state.refresh([_readiness_only("a", 3.0)], {"a": 3.0}, 3.0, {}, g.own)
    g.sites[0].running = 10
    after = g.refresh(4.0).view("a/p")
    assert snap.view("a/p") is not None
    assert after is not None and after.soft is not None and after.soft >= 140


def test_signals_and_health_down_everywhere_take_the_front_candidate() -> None:
    """'While both are down on every site, the front candidate is tried as a last resort.'"""
    g = Grid([Site("front", max_running=10), Site("back", max_running=1000)])
    g.refresh(1.0)
    down = {"front/p": Health.DOWN, "back/p": Health.DOWN}
    snap = g.refresh(30.0, sampled_at=1.0, health=down)
    c = _sites(snap, Policy.GRIDROUTE, n=300)
    assert c == {"front": 300}
    assert decide(snap, MODEL, Random(1)).path is Path.LAST_RESORT
    # A retry after the front failed takes the next one in config order.
    d = decide(snap, MODEL, Random(1), exclude=frozenset({"front/p"}))
    assert d.view is not None and d.view.site == "back"


def test_demoted_sites_with_live_signals_are_drawn_by_capacity() -> None:
    g = Grid([Site("front", max_running=100), Site("back", max_running=300)])
    snap = g.refresh(1.0, health={"front/p": Health.DOWN, "back/p": Health.DOWN})
    c = _sites(snap, Policy.GRIDROUTE, n=8000)
    assert c["back"] / 8000 == pytest.approx(0.75, abs=0.03)


@pytest.mark.parametrize("policy", POLICIES)
def test_the_routed_site_is_never_also_counted_refused(policy: Policy) -> None:
    s = AvailabilitySettings(full_after_ms=0)
    g = Grid([Site("a", running=100, waiting=3), Site("b", running=100, waiting=3)], s)
    snap = g.refresh(1.0)
    rng = Random(4)
    for _ in range(200):
        d = decide(snap, MODEL, rng, policy)
        assert d.view is not None
        assert (d.view.site, "full") not in d.refused
        assert len(d.refused) == 1
