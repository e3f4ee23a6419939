"""Shedding (issue 2 rule 6; site-selection.txt, the shedding paragraph; the PR)."""

from random import Random

from gridroute.core import AvailabilitySettings, Outcome, Policy, decide

from .grid_builder import MODEL, Grid, Site

ON = AvailabilitySettings(shedding=True)


def _full_grid(settings: AvailabilitySettings = ON) -> Grid:
    return Grid(
        [
            Site("a", running=100, waiting=30, max_running=100),
            Site("b", running=100, waiting=30, max_running=100),
        ],
        settings,
    )


def test_shedding_is_off_by_default() -> None:
    """'availability.shedding is the one switch, off by default.'"""
    g = _full_grid(AvailabilitySettings())
    for t in range(1, 20):
        snap = g.refresh(float(t))
    assert not snap.shedding
    assert decide(snap, MODEL, Random(1), Policy.SATURATION).outcome is Outcome.ROUTE


def test_sheds_once_every_site_has_been_full_for_full_after_ms() -> None:
    """'a model sheds once every healthy site serving it has been at its ceiling with work
    waiting for full_after_ms'."""
    g = _full_grid()
    shed_at = None
    for t in range(1, 12):
        if MODEL in g.refresh(float(t)).shedding and shed_at is None:
            shed_at = t
    assert shed_at == 6  # full since 1.0, full_after_ms 5000
    d = decide(g.state.snapshot, MODEL, Random(1), Policy.SATURATION)  # type: ignore[arg-type]
    assert d.outcome is Outcome.SHED and d.retry_after_s in {3, 4, 5, 6, 7}
    assert d.refused == (("", "shed"),)


def test_routes_again_once_no_sample_has_shown_full_for_room_after_ms() -> None:
    """'and routes again once no sample from a site has shown that for room_after_ms'."""
    g = _full_grid(AvailabilitySettings(shedding=True, route_below_rho=0.0, shed_above_rho=1.0))
    for t in range(1, 8):
        g.refresh(float(t))
    assert MODEL in g.state.snapshot.shedding  # type: ignore[union-attr]
    g.sites[0].waiting = 0
    assert MODEL in g.refresh(8.0).shedding  # the backlog at 7.0 is within 2 s
    assert MODEL in g.refresh(9.0).shedding
    assert MODEL not in g.refresh(10.0).shedding


def test_rho_hysteresis_sheds_above_1_05_and_routes_below_0_95() -> None:
    """'Shed above a saturation of 1.05, route again below 0.95, decided per snapshot.'"""
    g = Grid(
        [Site("a", running=100, waiting=3, max_running=100)],
        AvailabilitySettings(shedding=True, full_after_ms=0, smoothing=1.0, lookback_ms=1),
    )
    assert MODEL not in g.refresh(1.0).shedding  # rho 1.03: full, but not above 1.05
    g.sites[0].waiting = 10
    assert MODEL in g.refresh(2.0).shedding
    g.sites[0].waiting = 1
    assert MODEL in g.refresh(3.0).shedding  # rho 1.01 is still above 0.95
    g.sites[0].running, g.sites[0].waiting = 90, 0
    assert MODEL not in g.refresh(4.0).shedding  # rho 0.9 < 0.95


def test_retry_after_is_spread_over_three_to_seven_seconds() -> None:
    """'spread over 3-7 s per request so retries do not arrive together'."""
    g = _full_grid()
    for t in range(1, 8):
        snap = g.refresh(float(t))
    rng = Random(5)
    seen = {decide(snap, MODEL, rng, Policy.SATURATION).retry_after_s for _ in range(200)}
    assert seen == {3, 4, 5, 6, 7}


def test_unmeasured_candidates_never_hold_off_shedding() -> None:
    """'One that does not publish load is unmeasured ... and never holds off shedding.'"""
    g = Grid(
        [Site("a", running=100, waiting=30, max_running=100), Site("dark", measured=False)], ON
    )
    for t in range(1, 8):
        snap = g.refresh(float(t))
    assert MODEL in snap.shedding


def test_a_site_without_a_queue_series_holds_off_shedding() -> None:
    """Reference 1.3: a healthy site of unknown queue never lets the model shed."""
    g = Grid(
        [
            Site("a", running=100, waiting=30, max_running=100),
            Site("b", running=100, waiting=None, max_running=100),
        ],
        ON,
    )
    for t in range(1, 8):
        snap = g.refresh(float(t))
    assert not snap.shedding


def test_gridroute_still_routes_into_room_while_shed() -> None:
    """Admission, beyond the seed: while shed, a request that finds this gateway's room is
    still routed; only the excess is refused."""
    g = _full_grid()
    for t in range(1, 8):
        snap = g.refresh(float(t))
    assert MODEL in snap.shedding
    assert decide(snap, MODEL, Random(1), Policy.GRIDROUTE).outcome is Outcome.SHED
    # This gateway had 26 of site a's 130 (over a ceiling of 100) at the sample: its part of
    # the ceiling is 20, so only once 7 of its requests finished is there room to refill.
    for _ in range(26):
        g.own.start("a/p", 7.0)
    snap = g.refresh(7.5, sampled_at=7.0)
    for _ in range(6):
        g.own.end("a/p", 7.6)
    assert decide(snap, MODEL, Random(1), Policy.GRIDROUTE, g.own.counts).outcome is Outcome.SHED
    g.own.end("a/p", 7.7)
    d = decide(snap, MODEL, Random(1), Policy.GRIDROUTE, g.own.counts)
    assert d.outcome is Outcome.ROUTE and d.view is not None and d.view.site == "a"
