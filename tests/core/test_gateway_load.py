"""Fair share among gateways (issue 11): load that no gateway sent neither herds nor
shrinks a gateway's share; with one gateway the default policy is the seed's rule on
counted load whatever the external load."""

from collections import Counter
from random import Random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridroute.core import AvailabilitySettings, Outcome, Path, Policy, decide
from gridroute.core.gateway_load import ExternalEstimate, GatewayLoad, combine

from .grid_builder import MODEL, Grid, Site


def _report(g: Grid, others: dict[str, float] | None = None, gateways: int = 1) -> GatewayLoad:
    """This gateway's report of its own counts, plus other gateways' summed counts."""
    mine = {k: v for k, v in g.own.counts.items() if v}
    sites = {"here": (1, {k: float(v) for k, v in mine.items()})}
    if others is not None:
        sites["there"] = (gateways - 1, others)
    return combine(sites, mine)


def _refresh(g: Grid, now: float, load: GatewayLoad):
    samples = [g.sample(s, now) for s in g.sites]
    rounds = {s.name: now for s in g.sites}
    return g.state.refresh(samples, rounds, now, {}, g.own, load)


def _sites(snap, n: int, seed: int, own=None) -> Counter[str]:
    rng = Random(seed)
    c: Counter[str] = Counter()
    for _ in range(n):
        d = decide(snap, MODEL, rng, Policy.GRIDROUTE, own)
        c[d.view.site if d.view else d.outcome.value] += 1
    return c


def test_without_reports_external_load_shrinks_the_share_to_the_floor() -> None:
    """Today's reading (kept when no operator relays reports): 'this gateway carries 0
    of the polled load' is a 0.05 share, and the admission queue holds every request."""
    s = AvailabilitySettings(max_queue_ms=500)
    g = Grid([Site("a", running=90), Site("b", running=85)], s)
    snap = g.refresh(1.0)
    assert snap.views[0].share == pytest.approx(0.05)
    assert decide(snap, MODEL, Random(1), Policy.GRIDROUTE, g.own.counts).outcome is Outcome.HOLD


def test_a_lone_gateway_takes_all_unreported_load_as_external_after_one_window() -> None:
    s = AvailabilitySettings(max_queue_ms=500)
    g = Grid([Site("a", running=90), Site("b", running=80)], s)
    for t in range(1, 7):
        snap = _refresh(g, float(t), _report(g))
    assert g.state.external == pytest.approx(170)
    assert all(v.share == 1.0 for v in snap.views)
    # Its room is the sites' free room: 10 at a, 20 at b, and the two-site rule applies.
    assert snap.views[0].budget == pytest.approx(10) and snap.views[1].budget == pytest.approx(20)
    c = _sites(snap, 4000, 2, g.own.counts)
    assert c["a"] + c["b"] == 4000
    assert c["a"] / 4000 == pytest.approx((100 / 1.9) / (100 / 1.9 + 100 / 1.8), abs=0.03)


def test_several_gateways_share_only_what_gateways_sent() -> None:
    g = Grid([Site("a", running=60), Site("b", running=60)])  # 120 polled: 40 external
    for _ in range(20):
        g.own.start("a/p", 0.0)
    for t in range(1, 60):
        snap = _refresh(g, float(t), _report(g, {"a/p": 30.0, "b/p": 30.0}, gateways=2))
    # 20 own of 80 that gateways sent (not of all 120).
    assert g.state.external == pytest.approx(40, abs=1)
    assert snap.views[0].share == pytest.approx(20 / 80, abs=0.01)


def test_a_report_lagging_one_poll_moves_the_estimate_only_a_little() -> None:
    e = ExternalEstimate(tau_s=10.0)
    assert e.update(0.0, 0.0) == 0.0
    assert e.update(128.0, 1.0) < 13.0  # one poll of lag read as external load
    for t in range(2, 60):
        value = e.update(40.0, float(t))
    assert value == pytest.approx(40, abs=1)
    assert e.update(-50.0, 61.0) >= 0.0


SETTINGS = st.sampled_from(
    [
        AvailabilitySettings(),
        AvailabilitySettings(shedding=True),
        AvailabilitySettings(max_queue_ms=500),
        AvailabilitySettings(max_queue_ms=500, queue_overflow="shed"),
    ]
)


@settings(max_examples=60, deadline=None)
@given(
    caps=st.tuples(st.integers(16, 400), st.integers(16, 400)),
    external=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    own=st.tuples(st.integers(0, 40), st.integers(0, 40)),
    availability=SETTINGS,
    seed=st.integers(0, 1000),
)
def test_a_site_with_free_slots_keeps_the_seed_share_whatever_the_external_load(
    caps, external, own, availability, seed
) -> None:
    """Two sites, one gateway, any external load: each site with a free slot by counted
    load gets at least the seed's 10 % (tolerance: 3 sigma of 600 draws at p = 0.1)."""
    sites = []
    for name, cap, ext, mine in zip("ab", caps, external, own, strict=True):
        ext_n = int(ext * max(cap - mine, 0))
        sites.append(Site(name, running=float(ext_n + mine), max_running=float(cap)))
    g = Grid(sites, availability.model_copy(update={"explore_floor": 0.0}))
    for name, mine in zip("ab", own, strict=True):
        for _ in range(mine):
            g.own.start(f"{name}/p", 0.0)
    for t in range(1, 8):
        snap = _refresh(g, float(t), _report(g))
    free = [v.site for v in snap.views if v.base + g.own.now(v.key) + 1 <= v.room_ceiling]
    c = _sites(snap, 600, seed, g.own.counts)
    for site in free:
        assert c[site] >= 600 * (0.1 - 3 * 0.0123), (site, c, free)
    if free:
        assert c[Outcome.HOLD.value] == 0 and c[Outcome.SHED.value] == 0, c


def test_the_routed_path_under_external_load_is_the_seed_arm() -> None:
    g = Grid([Site("a", running=50), Site("b", running=50), Site("c", running=95)])
    for t in range(1, 8):
        snap = _refresh(g, float(t), _report(g))
    d = decide(snap, MODEL, Random(3), Policy.GRIDROUTE, g.own.counts)
    assert d.path is Path.PRESSURE_P2C


def test_on_an_idle_grid_the_gateways_that_report_split_the_room() -> None:
    """Nothing in flight anywhere measures no share; each of several reporting gateways
    reading that as share 1 at once overfilled the grid at a cold start past capacity."""
    g = Grid([Site("a", running=0, max_running=80), Site("b", running=0, max_running=40)])
    snap = _refresh(g, 1.0, _report(g, {}, gateways=8))
    assert [v.budget for v in snap.views] == pytest.approx([10.0, 5.0])
    alone = Grid([Site("a", running=0, max_running=80)])
    assert _refresh(alone, 1.0, _report(alone)).views[0].budget == pytest.approx(80.0)
