"""Hypothesis properties of the pure core (issue 2, "Tests and benchmark")."""

from collections import Counter
from random import Random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridroute.core import AvailabilitySettings, Health, Outcome, Path, Policy, decide

from .grid_builder import MODEL, Grid, Site

site_st = st.builds(
    Site,
    name=st.just("x"),
    running=st.one_of(st.none(), st.floats(0, 300)),
    waiting=st.one_of(st.none(), st.floats(0, 50)),
    ready=st.sampled_from([None, 0.0, 1.0, 2.0]),
    max_running=st.one_of(st.none(), st.floats(1, 300)),
    measured=st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(
    sites=st.lists(site_st, min_size=1, max_size=6),
    health=st.lists(st.sampled_from(list(Health)), min_size=6, max_size=6),
    policy=st.sampled_from(list(Policy)),
    seed=st.integers(0, 2**32),
)
def test_never_a_refused_site_while_an_eligible_one_exists(sites, health, policy, seed) -> None:
    for i, s in enumerate(sites):
        s.name = f"s{i}"
    g = Grid(sites)
    hmap = {f"s{i}/p": health[i] for i in range(len(sites))}
    snap = g.refresh(1.0, health=hmap)
    d = decide(snap, MODEL, Random(seed), policy)
    plan = snap.plan(MODEL)
    assert plan is not None
    if plan.healthy:
        assert d.outcome is Outcome.ROUTE and d.view in plan.healthy
    elif plan.unmeasured or plan.silent:
        assert d.path is Path.FALLBACK
    elif d.outcome is Outcome.ROUTE:
        assert d.path is Path.LAST_RESORT and d.view is not None and d.view.ready
    else:
        assert d.outcome is Outcome.NO_SITE and all(not v.ready for v in plan.views)


@pytest.mark.parametrize("policy", [Policy.SATURATION, Policy.GRIDROUTE])
def test_shares_converge_to_capacity_share_under_equal_rho(policy: Policy) -> None:
    """Equal rho everywhere: the draw follows capacity. 120k seeded draws; tolerance 0.01
    absolute per site (about 4 standard errors)."""
    caps = [128, 128, 64, 32]
    g = Grid(
        [Site(f"s{i}", running=c / 2, max_running=c) for i, c in enumerate(caps)],
        AvailabilitySettings(explore_floor=0, fair_share=False),
    )
    snap = g.refresh(1.0)
    rng = Random(42)
    n = 120_000
    c: Counter[str] = Counter(decide(snap, MODEL, rng, policy).view.site for _ in range(n))  # type: ignore[union-attr]
    for i, cap in enumerate(caps):
        assert c[f"s{i}"] / n == pytest.approx(cap / sum(caps), abs=0.01)


@settings(max_examples=100, deadline=None)
@given(
    cap=st.tuples(st.floats(1, 1000), st.floats(1, 1000)),
    run=st.tuples(st.floats(0, 999), st.floats(0, 999)),
)
def test_two_site_clamp_holds_for_any_rho_and_capacity(cap, run) -> None:
    g = Grid(
        [
            Site("a", running=min(run[0], cap[0] - 1), max_running=cap[0]),
            Site("b", running=min(run[1], cap[1] - 1), max_running=cap[1]),
        ],
        AvailabilitySettings(explore_floor=0, fair_share=False, ceiling_floor=1),
    )
    snap = g.refresh(1.0)
    rng = Random(0)
    n = 4000
    picks = [decide(snap, MODEL, rng, Policy.SATURATION) for _ in range(n)]
    if all(p.path is Path.PRESSURE_WEIGHTED for p in picks):
        share = sum(p.view.site == "a" for p in picks) / n  # type: ignore[union-attr]
        assert 0.1 - 0.03 <= share <= 0.9 + 0.03


@settings(max_examples=60, deadline=None)
@given(
    sites=st.lists(site_st, min_size=1, max_size=5),
    seed=st.integers(0, 2**32),
    policy=st.sampled_from(list(Policy)),
)
def test_decisions_are_identical_for_identical_inputs_and_seed(sites, seed, policy) -> None:
    for i, s in enumerate(sites):
        s.name = f"s{i}"
    runs = []
    for _ in range(2):
        snap = Grid(sites).refresh(1.0)
        rng = Random(seed)
        runs.append(
            [
                (d.outcome, d.path, d.key)
                for d in (decide(snap, MODEL, rng, policy) for _ in range(50))
            ]
        )
    assert runs[0] == runs[1]
