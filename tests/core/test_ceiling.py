"""Learned ceilings and rho (issue 2 rule 1; reference 1.3)."""

import pytest

from gridroute.core.ceiling import CeilingState, effective_ceiling, rho_of, teach
from gridroute.core.sample import Sample
from gridroute.core.settings import AvailabilitySettings

from .grid_builder import Grid, Site

S = AvailabilitySettings()


def _teach(*samples: Sample) -> CeilingState:
    st = CeilingState.empty(0.0)
    for s in samples:
        st = teach(st, s, S)
    return st


def test_soft_ceiling_is_the_most_held_with_nothing_waiting() -> None:
    """'Learn the soft ceiling (the most in-flight held with nothing waiting)'."""
    st = _teach(
        Sample("a", "p", 1, running=30, waiting=0, generation=1),
        Sample("a", "p", 2, running=50, waiting=0, generation=1),
        Sample("a", "p", 3, running=20, waiting=0, generation=1),
    )
    assert st.soft == pytest.approx(50, rel=0.01)  # decayed for 1 s of a 10 min half-life


def test_a_queued_sample_never_raises_the_soft_ceiling() -> None:
    """'a queued sample never raises the soft ceiling'."""
    st = _teach(
        Sample("a", "p", 1, running=30, waiting=0, generation=1),
        Sample("a", "p", 2, running=80, waiting=5, generation=1),
    )
    assert st.soft == pytest.approx(30, rel=0.01)


def test_hard_ceiling_is_the_least_held_at_a_demonstrated_limit() -> None:
    """'the hard ceiling (the least in-flight held at a demonstrated limit, i.e. with work
    waiting)'."""
    st = _teach(
        Sample("a", "p", 1, running=60, waiting=4, generation=1),
        Sample("a", "p", 2, running=50, waiting=4, generation=1),
        Sample("a", "p", 3, running=70, waiting=4, generation=1),
    )
    assert st.hard == pytest.approx(50, rel=0.01)  # relaxed for 1 s


def test_soft_ceiling_decays_by_half_per_half_life_once_load_falls() -> None:
    """'half-life decay of 10 minutes once load falls'."""
    st = _teach(
        Sample("a", "p", 0, running=100, generation=1),
        Sample("a", "p", 600, running=10, generation=1),
    )
    assert st.soft == pytest.approx(50)


def test_the_floor_is_eight() -> None:
    """'ceiling floor 8'."""
    assert effective_ceiling(None, None, None, S.ceiling_floor) == 8
    assert effective_ceiling(3.0, None, None, S.ceiling_floor) == 8
    assert effective_ceiling(None, 2.0, 128.0, S.ceiling_floor) == 8


def test_effective_ceiling_is_capacity_raised_to_soft_and_capped_by_hard() -> None:
    assert effective_ceiling(40.0, None, 128.0, 8) == 128
    assert effective_ceiling(200.0, None, 128.0, 8) == 200
    assert effective_ceiling(200.0, 90.0, 128.0, 8) == 90
    assert effective_ceiling(40.0, None, None, 8) == 40


def test_learning_is_scoped_to_the_config_generation() -> None:
    """'Learning is scoped to the provider's config generation'."""
    st = _teach(
        Sample("a", "p", 1, running=90, generation=1), Sample("a", "p", 2, running=20, generation=2)
    )
    assert st.soft == 20


def test_learning_is_disabled_without_a_generation_but_pressure_stays_usable() -> None:
    """'disabled without it, while fresh pressure stays usable'."""
    g = Grid([Site("a", running=50, max_running=None, generation=None)])
    snap = g.refresh(1.0)
    v = snap.views[0]
    assert v.soft is None and v.ceiling == 8
    assert v.rho is not None and v.rho > 1


def test_rho_is_smoothed_once_per_new_sample_with_alpha_point_three() -> None:
    """'rho = in-flight over the ceiling, smoothed once per new sample (alpha 0.3)'."""
    site = Site("a", running=0, max_running=100)
    g = Grid([site], AvailabilitySettings(lookback_ms=1))
    assert g.refresh(1.0).views[0].rho == 0.0
    site.running = 100
    assert g.refresh(2.0).views[0].rho == pytest.approx(0.3)
    # A refresh that brought no new sample changes nothing.
    assert g.refresh(2.5, sampled_at=2.0).views[0].rho == pytest.approx(0.3)
    assert g.refresh(3.0).views[0].rho == pytest.approx(0.3 * 0.7 + 0.3)


def test_kv_cache_pressure_counts_as_rho_when_larger() -> None:
    """'combined with KV-cache pressure where the site reports it (the larger of the two)'."""
    assert rho_of(10, 100, 0.72, 0.8) == pytest.approx(0.9)
    assert rho_of(90, 100, 0.08, 0.8) == pytest.approx(0.9)
    assert rho_of(None, 100, 0.5, 0.8) is None


def test_explore_floor_lifts_every_measured_capacity_to_a_quarter_of_the_largest() -> None:
    """'explore floor 0.25 (every measured capacity lifted to at least a quarter of the
    largest)'."""
    g = Grid([Site("big", max_running=400), Site("tiny", max_running=10)])
    plan = g.refresh(1.0).plan("m")
    assert plan is not None
    assert plan.weights["tiny/p"] == 100
    assert plan.weights["big/p"] == 400


def test_gauges_expose_soft_hard_effective_reported_and_counted() -> None:
    g = Grid([Site("a", running=40, waiting=0, max_running=64)])
    v = g.refresh(1.0).views[0]
    assert (v.soft, v.hard, v.ceiling) == (40, None, 64)
    assert v.rho == pytest.approx(40 / 64)


def test_kv_pressure_lowers_the_ceiling_that_gridroute_counts_against() -> None:
    """KV at 0.6 with 30 in flight fills to kv_full (0.8) at 40 requests: that is the
    ceiling counted and pick rho read against, so KV pressure moves with own counts."""
    g = Grid([Site("a", running=30, max_running=100, kv=0.6)])
    for _ in range(30):
        g.own.start("a/p", 0.5)
    v = g.refresh(1.0).views[0]
    assert v.room_ceiling == pytest.approx(40)
    assert v.ceiling == 100  # the learned/declared ceiling is unchanged
    assert v.counted_rho(30) == pytest.approx(30 / 40)  # == kv / kv_full at the sample
    assert v.counted_rho(20) == pytest.approx(20 / 40)  # ten finished since
    assert v.budget == pytest.approx(40)  # fair share: only the KV-bounded room


def test_kv_bound_never_raises_the_ceiling() -> None:
    from gridroute.core.ceiling import kv_bounded

    assert kv_bounded(100, 10, 0.01, 0.8) == 100
    assert kv_bounded(100, 10, None, 0.8) == 100
    assert kv_bounded(100, 0, 0.5, 0.8) == 100
    assert kv_bounded(100, 1, 1.0, 0.8) == 1.0


def test_a_declared_capacity_below_the_floor_bounds_it() -> None:
    """Issue 23: a 7-slot site has 7 slots, not the floor's 8; one that held more with
    nothing waiting is raised to what it held, and an unknown capacity keeps the floor."""
    assert effective_ceiling(None, None, 7.0, S.ceiling_floor) == 7
    assert effective_ceiling(7.0, None, 7.0, S.ceiling_floor) == 7
    assert effective_ceiling(6.0, None, 4.0, S.ceiling_floor) == 6
    assert effective_ceiling(3.0, None, None, S.ceiling_floor) == 8
    assert effective_ceiling(None, None, 0.0, S.ceiling_floor) == 8


def test_a_soft_ceiling_decays_below_the_floor_and_the_floor_still_holds() -> None:
    """The soft ceiling decays freely (the floor applies once, in the effective ceiling),
    so a small site's soft reading is what it held, not the floor."""
    st0 = CeilingState.empty(0.0)
    st1 = teach(st0, Sample("s", "p", 0.0, running=6, waiting=0, ready=1, generation=1), S)
    st2 = teach(st1, Sample("s", "p", 1.0, running=5, waiting=0, ready=1, generation=1), S)
    assert st2.soft is not None and 5.9 < st2.soft <= 6.0
    assert effective_ceiling(st2.soft, None, None, S.ceiling_floor) == 8
    assert effective_ceiling(st2.soft, None, 4.0, S.ceiling_floor) == st2.soft
