"""With an admission queue a gateway refills what it held at a site since the sample.

The budget counts what the gateway held at the sample it reads. A slot it took after
that sample (a borrow once a hold ran out) and whose request has just finished counted
as other gateways' room, so the next request waited out the queue and then borrowed it
anyway, and the slot idled meanwhile (outside-load world 99 of
`bench/bench_differential.py`: 248 requests with a 500 ms queue against 414 without
one). The refill keeps the borrow until a newer sample; another gateway's budget may
count the same slot meanwhile, as it could while the borrow was in flight
(docs/selection.md, "held at the site since the sample")."""

from __future__ import annotations

from random import Random

import pytest

from gridroute.core import (
    AvailabilitySettings,
    Candidate,
    GridState,
    OwnLoad,
    Path,
    Policy,
    Sample,
    Snapshot,
)
from gridroute.core.demand import DemandMeter, report
from gridroute.core.flow import Attempt, Hold, request_flow
from gridroute.core.gateway_load import combine
from gridroute.core.select import decide

from .flow_driver import FakeGrid
from .grid_builder import MODEL, Grid, Site


def _grid(max_queue_ms: int, shedding: bool = False) -> Grid:
    s = AvailabilitySettings(
        freshness_window_ms=1500,
        lookback_ms=1500,
        max_queue_ms=max_queue_ms,
        shedding=shedding,
    )
    # a: 7 of 8 slots held by another gateway; b: full.
    sites = [Site("a", running=7.0, max_running=8.0), Site("b", running=8.0, max_running=8.0)]
    return Grid(sites, s)


def _refresh(g: Grid, at: float, now: float | None = None) -> Snapshot:
    """Sampled at `at`, read at `now` (`at` if None): the other gateway reports the 7
    at a and the 8 at b."""
    now = at if now is None else now
    samples = [g.sample(s, at) for s in g.sites]
    reports = combine({"here": (1, {}), "there": (1, {"a/p": 7.0, "b/p": 8.0})}, {})
    return g.state.refresh(samples, {s.name: now for s in g.sites}, now, {}, g.own, reports)


def _first_step(g: Grid, snap: Snapshot, now: float) -> Attempt | Hold:
    step = next(request_flow(FakeGrid(snap, g.own, now=now), MODEL, Policy.GRIDROUTE))
    assert isinstance(step, Attempt | Hold)
    return step


def test_without_room_in_its_budget_a_request_holds() -> None:
    # The gateway held nothing at the sample: its share is the floor, its budget at a
    # under a request, so a request holds (the queue's rule, unchanged).
    g = _grid(500)
    snap = _refresh(g, 1.0)
    assert next(v for v in snap.views if v.site == "a").budget < 1.0
    assert isinstance(_first_step(g, snap, 1.1), Hold)


def test_a_slot_this_gateway_held_since_the_sample_is_refilled_at_once() -> None:
    g = _grid(500)
    snap = _refresh(g, 1.0)
    g.own.start("a/p", 1.6, MODEL)  # a hold ran out and borrowed a's last slot
    g.own.end("a/p", 1.8, MODEL)  # answered: the slot is free again
    step = _first_step(g, snap, 1.8)
    assert isinstance(step, Attempt)
    assert step.decision.view is not None and step.decision.view.site == "a"
    assert step.decision.path is not Path.BORROW


def test_held_between_the_sample_and_the_snapshot_counts_too() -> None:
    g = _grid(500)
    g.own.start("a/p", 1.05, MODEL)  # after the sample at 1.0, before the snapshot
    g.own.end("a/p", 1.08, MODEL)
    snap = _refresh(g, 1.0, now=1.1)
    step = _first_step(g, snap, 1.15)
    assert isinstance(step, Attempt) and step.decision.view is not None
    assert step.decision.view.site == "a"


def test_a_newer_sample_gives_the_slot_back_to_every_gateway() -> None:
    # Once a sample taken after the request ended is read, every gateway sees the slot
    # free; it is shared by the budgets again and this gateway holds.
    g = _grid(500)
    _refresh(g, 1.0)
    g.own.start("a/p", 1.6, MODEL)
    g.own.end("a/p", 1.8, MODEL)
    snap = _refresh(g, 2.0)
    assert isinstance(_first_step(g, snap, 2.1), Hold)


def test_not_past_the_ceiling_at_an_over_full_site() -> None:
    # At a site over-full at the sample the budget is a proportional part, floored so
    # its queue drains: nothing held since is refilled past it (here the estimate's
    # room already says so; `kept` is -1 there as well, for budgets that follow demand).
    g = _grid(500)
    g.sites[0].waiting = 2.0  # a: 9 in flight on 8 slots
    g.own.start("a/p", 0.9, MODEL)  # this gateway's one of them
    snap = _refresh(g, 1.0)
    g.own.end("a/p", 1.2, MODEL)
    g.sites[0].waiting = 0.0
    step = _first_step(g, snap, 1.3)
    assert isinstance(step, Hold)


@pytest.mark.parametrize(("max_queue_ms", "shedding"), [(0, False), (500, True)])
def test_without_a_queue_or_with_shedding_nothing_changes(
    max_queue_ms: int, shedding: bool
) -> None:
    # Without a queue the request borrows the slot as before; with shedding on nothing
    # is refilled past the budget either (`bench/bench_fairness.py`'s rules).
    g = _grid(max_queue_ms, shedding)
    snap = _refresh(g, 1.0)
    g.own.start("a/p", 1.6, MODEL)
    g.own.end("a/p", 1.8, MODEL)
    step = _first_step(g, snap, 1.8)
    if shedding:
        assert isinstance(step, Hold)
    else:
        assert isinstance(step, Attempt) and step.decision.path is Path.BORROW


def test_a_refill_needs_room_by_the_estimate() -> None:
    # This gateway held 3 at a since the sample, where the sample showed 2 free slots
    # (it overshot): it refills 2, not the third.
    g = _grid(500)
    g.sites[0].running = 6.0
    reports = combine({"here": (1, {}), "there": (1, {"a/p": 6.0, "b/p": 8.0})}, {})
    samples = [g.sample(s, 1.0) for s in g.sites]
    snap = g.state.refresh(samples, {"a": 1.0, "b": 1.0}, 1.0, {}, g.own, reports)
    for _ in range(3):
        g.own.start("a/p", 1.2, MODEL)
    for _ in range(3):
        g.own.end("a/p", 1.4, MODEL)
    for _ in range(2):
        step = _first_step(g, snap, 1.5)
        assert isinstance(step, Attempt) and step.decision.view is not None
        assert step.decision.view.site == "a"
        g.own.start("a/p", 1.5, MODEL)
    assert isinstance(_first_step(g, snap, 1.5), Hold)


def test_a_refill_stops_at_the_demand_target_rounded_up() -> None:
    # Past capacity the budget follows demand: this gateway holds 40 of a's 100 slots
    # and wants 5 more, another holds 40 and wants 60, so this one's target is 31.
    # It took one more slot after the sample and that request ended: refilling it
    # would keep 41 where its target says 32 at most, so the request holds and the
    # slots move to the gateway that wants them.
    s = AvailabilitySettings(freshness_window_ms=1500, lookback_ms=1500, max_queue_ms=500)
    cand = Candidate("a", "p", frozenset({MODEL}))
    own = OwnLoad()
    for _ in range(40):
        own.start("a/p", 0.5, MODEL)
    meter = DemandMeter()
    for _ in range(5):
        meter.hold(MODEL)
    mine = report((cand,), dict(own.counts), own.models, meter, 1.0)
    beyond, unmet = mine.beyond["a/p"] + 60.0, mine.unmet["a/p"] + 60.0
    load = combine({"here": (2, {"a/p": 80.0}, {"a/p": beyond}, {"a/p": unmet})}, own.counts, mine)
    state = GridState((cand,), s, models=[MODEL])
    sample = Sample("a", "p", 1.0, running=80.0, waiting=0.0, ready=1.0, max_running=100.0)
    own.start("a/p", 1.1, MODEL)  # one more after the sample: 41
    snap = state.refresh([sample], {"a": 1.0}, 1.2, {}, own, load)
    view = snap.view("a/p")
    assert view is not None and view.target is not None
    assert view.target == pytest.approx(100 * 45 / 145)
    assert (view.kept, view.keep_cap) == (41, 32)
    own.end("a/p", 1.3, MODEL)
    step = next(request_flow(FakeGrid(snap, own, now=1.3), MODEL, Policy.GRIDROUTE))
    assert isinstance(step, Hold)


def test_a_refill_comes_after_room_within_the_whole_budget() -> None:
    # The slot a refill takes showed free at the sample, so another gateway's budget may
    # count it too: with whole room left in its budget at another site of the same tier,
    # the gateway takes that room. Taken side by side, the two-site formula sent 35 of
    # these 200 requests to the refill, and in simulated runs such refills collided with
    # the other gateways' budgets (outside-load world 209 of `bench/bench_differential.py`
    # with a 500 ms queue: 34 overshoots where no queue has none).
    s = AvailabilitySettings(freshness_window_ms=1500, lookback_ms=1500, max_queue_ms=500)
    # a: 7 of 8 slots held by another gateway; c: 10 of 20 in flight are this gateway's.
    g = Grid([Site("a", running=7.0, max_running=8.0), Site("c", running=20.0)], s)
    for _ in range(10):
        g.own.start("c/p", 0.9, MODEL)
    samples = [g.sample(site, 1.0) for site in g.sites]
    reports = combine({"here": (2, {"a/p": 7.0, "c/p": 20.0})}, g.own.counts)
    snap = g.state.refresh(samples, {"a": 1.0, "c": 1.0}, 1.0, {}, g.own, reports)
    a, c = snap.view("a/p"), snap.view("c/p")
    assert a is not None and c is not None
    assert a.budget_up < 1.0 <= c.budget - 10  # no share of a's slot; room left at c
    g.own.start("a/p", 1.6, MODEL)  # a hold ran out and borrowed a's last slot
    g.own.end("a/p", 1.8, MODEL)  # answered: a refill may take it again
    assert a.refills(0, g.own.peaks.get("a/p", 0))
    rng = Random(7)
    picked = set()
    for _ in range(200):
        d = decide(snap, MODEL, rng, Policy.GRIDROUTE, g.own.counts, peaks=g.own.peaks)
        assert d.view is not None
        picked.add(d.view.site)
    assert picked == {"c"}
    # With c's budget used up, the refill is taken (not a hold).
    for _ in range(int(c.budget) - 10):
        g.own.start("c/p", 1.8, MODEL)
    d = decide(snap, MODEL, rng, Policy.GRIDROUTE, g.own.counts, peaks=g.own.peaks)
    assert d.view is not None and d.view.site == "a" and d.path is Path.SINGLE


def _three_sites() -> Grid:
    """w: 70 of its 95 in flight this gateway's (whole room left in its budget, rho
    0.86 as it ranks); r and x: 7 of 8 held by another gateway (rho 0.56), no whole
    slot in this gateway's budget at either. The seed's pairs always pick r or x, more
    than `BORROW_MARGIN` below w."""
    s = AvailabilitySettings(freshness_window_ms=1500, lookback_ms=1500, max_queue_ms=500)
    sites = [Site("w", running=95.0), Site("r", running=7.0, max_running=8.0)]
    g = Grid([*sites, Site("x", running=7.0, max_running=8.0)], s)
    for _ in range(70):
        g.own.start("w/p", 0.9, MODEL)
    return g


def _snap(g: Grid) -> Snapshot:
    samples = [g.sample(site, 1.0) for site in g.sites]
    reports = combine({"here": (2, {"w/p": 95.0, "r/p": 7.0, "x/p": 7.0})}, g.own.counts)
    return g.state.refresh(samples, {s.name: 1.0 for s in g.sites}, 1.0, {}, g.own, reports)


def test_with_a_refill_left_the_pairs_do_not_borrow_past_the_budget() -> None:
    # Without a refill, the one site left within the budget (w) is far fuller than the
    # seed's pick, so the request borrows the pick (`BORROW_MARGIN`); with a refill at
    # r it takes w's whole room first, and refills next: never a borrow before either.
    g = _three_sites()
    snap = _snap(g)
    rng = Random(3)
    d = decide(snap, MODEL, rng, Policy.GRIDROUTE, g.own.counts, peaks=g.own.peaks)
    assert d.path is Path.BORROW and d.view is not None and d.view.site in ("r", "x")
    g.own.start("r/p", 1.6, MODEL)
    g.own.end("r/p", 1.8, MODEL)
    for _ in range(100):
        d = decide(snap, MODEL, rng, Policy.GRIDROUTE, g.own.counts, peaks=g.own.peaks)
        assert d.path is not Path.BORROW and d.view is not None and d.view.site == "w"


def test_a_queue_free_refill_comes_before_a_queued_sites_whole_room() -> None:
    # The tiers first: queue-free before queued, a refill included.
    g = _three_sites()
    g.sites[0].waiting = 1.0  # w has work waiting: the queued tier
    snap = _snap(g)
    g.own.start("r/p", 1.6, MODEL)
    g.own.end("r/p", 1.8, MODEL)
    d = decide(snap, MODEL, Random(3), Policy.GRIDROUTE, g.own.counts, peaks=g.own.peaks)
    assert d.view is not None and d.view.site == "r" and d.path is Path.SINGLE
