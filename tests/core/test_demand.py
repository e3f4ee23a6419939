"""Budgets that follow demand between gateways (core/demand.py), and the five faults of
the attempt taken out before it landed (docs/selection.md, "Budgets that follow demand
between gateways"): each is a named test here that its design fails."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from gridroute.core import AvailabilitySettings, Candidate, OwnLoad, Policy, Sample
from gridroute.core.demand import (
    LIFT_AFTER,
    LIFT_AFTER_WANTED,
    DemandMeter,
    DemandReport,
    Following,
    SiteDemand,
    received,
    report,
    settle,
)
from gridroute.core.flow import Refuse, request_flow
from gridroute.core.gateway_load import GatewayLoad, combine
from gridroute.core.gridstate import GridState
from gridroute.core.select import Outcome
from gridroute.gateway.load_report import LoadReport
from gridroute.wire.signals import Decoded, GatewaySums

from .test_fairness import full_grid

FOLLOW = AvailabilitySettings(shedding=True, follow_demand=True)
X, Y = Candidate("a", "p", frozenset({"x"})), Candidate("b", "p", frozenset({"y"}))


def _state(*cands: Candidate, settings: AvailabilitySettings = FOLLOW) -> GridState:
    return GridState(cands, settings, models=sorted({m for c in cands for m in c.models}))


def _full(site: str, running: float, at: float) -> Sample:
    return Sample(site, "p", at, running=running, waiting=0.0, ready=1.0, max_running=100.0)


def _budget(state: GridState, own: OwnLoad, load: GatewayLoad, key: str, running: float) -> float:
    samples = [_full(c.site, running, t) for c in state.candidates for t in (0.5, 1.0)]
    snap = state.refresh(samples, {c.site: 1.0 for c in state.candidates}, 1.0, {}, own, load)
    view = snap.view(key)
    assert view is not None
    return view.budget


def _busy(key: str, model: str, held: int, waiting: int) -> tuple[OwnLoad, DemandMeter]:
    """This gateway holding `held` requests of `model` at `key`, with `waiting` more."""
    own = OwnLoad()
    for _ in range(held):
        own.start(key, 0.1, model)
    meter = DemandMeter()
    for _ in range(waiting):
        meter.hold(model)
    return own, meter


# -- what a gateway measures and reports -------------------------------------------------


def test_waiting_and_refused_requests_count_until_their_retry_after_runs_out() -> None:
    meter = DemandMeter()
    meter.hold("m")
    meter.refused("m", 10.0, 5.0)
    assert meter.unmet("m", 12.0) == 2
    meter.release("m")
    assert meter.unmet("m", 14.9) == 1
    assert meter.unmet("m", 15.0) == 0 and meter.models(15.0) == set()


def test_the_report_is_per_candidate_for_the_models_it_serves() -> None:
    meter = DemandMeter()
    meter.hold("y")
    got = report([X, Y], {"a/p": 2}, {"x": 3, "y": 1}, meter, 0.0)
    # a serves x: 3 in flight of which it holds 2; b serves y: 1 in flight + 1 waiting.
    assert got == DemandReport(beyond={"a/p": 1, "b/p": 2}, unmet={"b/p": 1})


# -- fault 1: one grid-wide number ----------------------------------------------------------


def test_unmet_demand_for_one_model_leaves_budgets_at_a_site_serving_only_another() -> None:
    """The reverted attempt summed unmet demand over the grid: waiting for model y shrank
    this gateway's budget at a site serving only x, and that room went idle."""
    own = OwnLoad()
    for _ in range(30):
        own.start("a/p", 0.1, "x")
    meter = DemandMeter()
    for _ in range(50):
        meter.hold("y")  # much unmet demand, all of it for y
    mine = report([X, Y], dict(own.counts), own.models, meter, 1.0)
    assert "a/p" not in mine.unmet
    others = {"a/p": 60.0}  # another gateway holds 60 at a, and wants nothing more
    load = combine({"here": (2, {"a/p": 90.0}, {}, dict(mine.unmet))}, dict(own.counts), mine)
    assert load.site_demand("a/p", 30) is None  # a is not contended: nobody waits for x
    followed = _budget(_state(X, Y), own, load, "a/p", 90.0)
    held = _budget(
        _state(X, Y, settings=AvailabilitySettings(shedding=True, follow_demand=False)),
        own,
        combine({"here": (2, {"a/p": 30.0 + others["a/p"]})}, dict(own.counts)),
        "a/p",
        90.0,
    )
    assert followed == held


# -- fault 2: fair order off read as no demand ---------------------------------------------------


def test_a_gateway_without_fair_order_reports_its_refused_clients() -> None:
    """With `fair_order: false` nothing waits in a fair order: the reverted attempt read
    such a gateway as wanting nothing past capacity, so its budgets never grew."""
    g, fg = full_grid(fair_order=False, follow_demand=True)
    for client in ("c1", "c2", "c3"):
        step = next(request_flow(fg, "m", Policy.GRIDROUTE, client=client))
        assert isinstance(step, Refuse) and step.decision.outcome is Outcome.SHED
    assert fg.fairness.waiting("m") == 0  # no fair order
    cand = g.state.candidates[0]
    got = report([cand], dict(g.own.counts), {"m": 8}, fg.fairness.demand, fg.now)
    assert got.unmet == {"a/p": 3}


# -- fault 3: overlay-routed models read as no demand ---------------------------------------------
# Through the gateway, where the model is known: tests/gateway/test_overlay_gateway.py,
# `test_an_overlay_routed_request_counts_as_its_models_demand`.


# -- fault 4: the Prometheus path lacked the gateway's own figure --------------------------------


def _current(follow: bool) -> Any:
    own = OwnLoad()
    own.start("a/p", 0.0, "x")
    meter = DemandMeter()
    for _ in range(4):
        meter.hold("x")
    return SimpleNamespace(
        own=own,
        state=SimpleNamespace(
            settings=AvailabilitySettings(follow_demand=follow), candidates=(X,), targets=dict
        ),
        fairness=SimpleNamespace(demand=meter),
        clock=lambda: 1.0,
    )


def test_a_prometheus_reader_adds_its_own_demand_to_what_prometheus_scraped() -> None:
    """A reader with no metrics listener is in no scrape: its own in-flight was added to
    the sums, its demand was not, so it read every other gateway as wanting more."""
    current = _current(True)
    rep = LoadReport(lambda: cast(Any, current), "gw-me", "hub")
    rep.unscraped = True
    other = GatewaySums(1.0, 1, {"a/p": 10.0}, {"a/p": 0.0}, {"a/p": 2.0})
    load = rep.load(Decoded(received=(), round_ends={}, gateways={"hub": other}), 1.0)
    assert load is not None and load.gateways == 2
    assert load.in_flight == {"a/p": 11.0}
    assert load.unmet == {"a/p": 6.0} and load.demand == {"a/p": 4.0}
    assert load.mine == DemandReport({"a/p": 4}, {"a/p": 4})


def test_a_scraped_prometheus_reader_splits_nothing_by_want() -> None:
    """Scraped, a reader's own want in the sums is a scrape old while its own report is
    fresh: split by the two, the gateways' claims could add past the room."""
    current = _current(True)
    rep = LoadReport(lambda: cast(Any, current), "gw-me", "hub")
    rep.speaks = False  # a Prometheus reader that is scraped
    sums = GatewaySums(1.0, 2, {"a/p": 10.0}, {"a/p": 3.0}, {"a/p": 6.0}, {"a/p": 2.0})
    load = rep.load(Decoded(received=(), round_ends={}, gateways={"hub": sums}), 1.0)
    assert load is not None and load.want == {}
    rep.speaks = True  # the mesh: its report rode on this very poll
    load = rep.load(Decoded(received=(), round_ends={}, gateways={"hub": sums}), 1.0)
    assert load is not None and load.want == {"a/p": 2.0}


# -- fault 5: room idle when only one gateway wants it ------------------------------------------


def test_a_site_no_other_gateway_routes_to_is_all_this_ones() -> None:
    """Demand is compared per site among the gateways that route there: another
    gateway wanting only b takes nothing of a, so this gateway's target at a is all of
    a's room (an earlier attempt yielded a share of a to it, and that room went idle)."""
    own, meter = _busy("a/p", "m", 40, 10)
    cands = (Candidate("a", "p", frozenset({"m"})), Candidate("b", "p", frozenset({"m"})))
    mine = report(cands, dict(own.counts), own.models, meter, 1.0)
    other = ({"b/p": 50.0}, {"b/p": 30.0}, {"b/p": 30.0})  # holds, beyond, unmet: all at b
    sums = {
        "here": (
            2,
            {"a/p": 40.0, **other[0]},
            {**dict(mine.beyond), "b/p": mine.beyond["b/p"] + other[1]["b/p"]},
            {**dict(mine.unmet), "b/p": mine.unmet["b/p"] + other[2]["b/p"]},
        )
    }
    load = combine(sums, dict(own.counts), mine)
    state = _state(*cands)
    samples = [_full(s, r, 1.0) for s, r in (("a", 40.0), ("b", 100.0))]
    snap = state.refresh(samples, {"a": 1.0, "b": 1.0}, 1.0, {}, own, load)
    a, b = snap.view("a/p"), snap.view("b/p")
    assert a is not None and b is not None
    assert a.target == pytest.approx(100.0)  # a's whole room
    assert b.target is not None and b.target < 100.0  # b is shared with the other


def test_a_site_only_one_gateway_wants_is_not_left_idle() -> None:
    """Yielding a share of a site to gateways that do not route there (the attempt's
    first fix) left its room unused; demand is compared only among those that do, so
    the one gateway that wants the site takes its free room once nobody refilled it."""
    alone = 1.0  # the others report nothing at this site: all its demand is this one's
    site = Following(base=26.0, held=20.0, free=30.0, room=50.0, share=alone, idle=1)
    ((_, budget, _, _),) = settle([(0, site)])
    assert budget == pytest.approx(50.0)  # all of the free room, not a share of it


def test_a_lying_peer_cannot_keep_room_idle() -> None:
    """A peer that reports a huge demand it does not use caps this gateway's budget, but
    room that nobody took for `LIFT_AFTER` samples is refilled all the same."""
    lie = 100.0 / 10_000.0  # this gateway's part of the demand the liar claims
    at = {
        n: Following(base=62.0, held=60.0, free=20.0, room=80.0, share=lie, idle=n)
        for n in (0, LIFT_AFTER)
    }
    ((_, capped, _, _),) = settle([(0, at[0])])
    ((_, lifted, _, lift),) = settle([(0, at[LIFT_AFTER])])
    assert capped < 60.0  # over its target: it does not refill what it frees
    assert lifted == 62.0 and lift  # the fair share's budget again, and for a while


def test_a_peer_that_also_lies_about_its_want_delays_the_lift_by_two_samples() -> None:
    """Where gateways report wanting the room, yielded room stands free a sample or two
    before they may take it, so idle room is read as a lie two samples later: the
    liar's claim holds a little longer, but not for good."""
    lie = 100.0 / 10_000.0

    def at(n: int) -> Following:
        return Following(62.0, 60.0, 20.0, 80.0, lie, n, wanted=500.0)

    ((_, capped, _, lift),) = settle([(0, at(LIFT_AFTER))])
    assert capped < 60.0 and not lift
    ((_, lifted, _, lift),) = settle([(0, at(LIFT_AFTER_WANTED))])
    assert lifted == 62.0 and lift


def test_equal_holdings_within_the_noise_of_a_sample_move_nothing() -> None:
    """Holdings a little past or short of the target keep the fair share's budget: each
    move idles a slot for a sample, and noise would move slots back and forth."""
    sites = [
        (0, Following(base=41.0, held=40.0, free=2.0, room=128.0, share=0.31, idle=1)),
        (1, Following(base=25.0, held=24.0, free=2.0, room=64.0, share=0.31, idle=1)),
    ]
    assert [b for _, b, _, _ in settle(sites)] == [41.0, 25.0]


# -- mixed versions ---------------------------------------------------------------------------


def test_a_gateway_that_reports_no_demand_demands_what_it_holds() -> None:
    """An older gateway sends in-flight only: it counts as wanting exactly what it holds
    there, the rule before this one."""
    mine = DemandReport({"a/p": 10}, {"a/p": 10})
    old = (1, {"a/p": 30.0})  # an older gateway's sums: no demand rows
    new = (1, {"a/p": 20.0}, dict(mine.beyond), dict(mine.unmet))
    load = combine({"west": old, "hub": new}, {"a/p": 20}, mine)
    got = load.site_demand("a/p", 20)
    assert got == SiteDemand(total=60.0, mine=30.0)


def test_without_follow_demand_nothing_is_reported_or_followed() -> None:
    current = _current(False)
    rep = LoadReport(lambda: cast(Any, current), "gw-me", "hub")
    headers = rep.headers()
    assert set(headers) == {"x-grid-gateway", "x-grid-in-flight"} and rep.demand is None
    on = LoadReport(lambda: cast(Any, _current(True)), "gw-me", "hub").headers()
    assert on["x-grid-demand"] == "a/p=4" and on["x-grid-unmet"] == "a/p=4"


def test_a_report_is_clamped_and_a_report_without_demand_demands_its_in_flight() -> None:
    counts = {"a/p": 3, "b/p": 1}
    assert received(counts, None) == DemandReport({"a/p": 1, "b/p": 3}, {})
    lie = DemandReport({"a/p": 10**6}, {"a/p": 2})
    assert received(counts, lie).beyond == {"a/p": 4 + 2}  # all in flight + unmet there


def test_a_site_whose_room_nobody_wanted_is_not_capped_for_a_while() -> None:
    over = dict(base=62.0, held=60.0, free=20.0, room=80.0, share=0.01, idle=0)
    ((_, capped, _, _),) = settle([(0, Following(**over))])  # type: ignore[arg-type]
    ((_, kept, _, _),) = settle([(0, Following(**over, lifted=True))])  # type: ignore[arg-type]
    assert capped < 60.0 and kept == 62.0


def test_demand_older_than_a_freshness_window_is_not_followed() -> None:
    own, meter = _busy("a/p", "x", 30, 5)
    mine = report([X], dict(own.counts), own.models, meter, 1.0)
    load = combine(
        {"here": (2, {"a/p": 90.0}, {"a/p": 40.0}, {"a/p": 25.0})}, dict(own.counts), mine
    )
    state = _state(X)
    first = state.refresh([_full("a", 90.0, 1.0)], {"a": 1.0}, 1.0, {}, own, load)
    assert first.view("a/p").target is not None  # type: ignore[union-attr]
    later = state.refresh([_full("a", 90.0, 20.0)], {"a": 20.0}, 20.0, {}, own, None)
    assert later.view("a/p").target is None  # type: ignore[union-attr]


def test_a_key_that_comes_back_is_no_longer_away() -> None:
    meter = DemandMeter()
    meter.refused("m", 0.0, 7.0, "k1")
    meter.refused("m", 0.0, 7.0, "k2")
    meter.refused("m", 0.0, 7.0)  # no key: away until its Retry-After runs out
    assert meter.away("m", 1.0) == 3
    meter.arrived("m", "k1")  # back after half its Retry-After
    assert meter.away("m", 4.0) == 2
    assert meter.away("m", 7.0) == 0


def test_an_operator_that_relays_no_demand_turns_following_off() -> None:
    """An older operator takes the in-flight header and drops the demand headers: this
    gateway's own demand would then read as the site's whole demand."""
    rep = LoadReport(lambda: cast(Any, _current(True)), "gw-me", "hub")
    rep.headers()  # sends demand
    old = GatewaySums(1.0, 2, {"a/p": 11.0})  # no demand rows come back
    load = rep.load(Decoded(received=(), round_ends={}, gateways={"hub": old}), 1.0)
    assert load is not None and load.mine is None and load.site_demand("a/p", 1) is None


def test_room_idle_while_every_gateway_is_short_is_a_grid_filling_up() -> None:
    """Only a cap that left room idle lifts the cap: at the start of a run room stands
    idle while gateways are short of their targets, and a latch on that turned
    following off for the first 30 s (measured live)."""
    short = Following(base=12.0, held=10.0, free=40.0, room=80.0, share=0.5, idle=5)
    ((_, budget, _, lift),) = settle([(0, short)])
    assert not lift and budget == pytest.approx(40.0)  # takes free room up to its target


# -- free room split by what gateways want ----------------------------------------------


def test_a_gateway_wants_its_shortfall_against_its_last_target_at_most_its_unmet() -> None:
    cands = [Candidate("a", "p", frozenset({"m"})), Candidate("b", "p", frozenset({"m"}))]
    own, meter = _busy("a/p", "m", 10, 4)
    rep = report(cands, {"a/p": 10}, own.models, meter, 1.0, {"a/p": 12.5, "b/p": 30.0})
    assert rep.want == {"a/p": 3, "b/p": 4}  # ceil(12.5 - 10); 30 short, but 4 waiting
    assert report(cands, {"a/p": 10}, own.models, meter, 1.0).want == {}  # no targets yet
    assert received({"a/p": 10}, DemandReport({}, {"a/p": 2}, {"a/p": 9})).want == {"a/p": 2}


def _site(**kw: float) -> Following:
    base = dict(base=28.3, held=28.0, free=3.0, room=128.0, share=0.2, idle=1)
    base.update(kw)
    return Following(**base)  # type: ignore[arg-type]


def test_room_that_outlasted_a_sample_goes_to_the_gateways_that_want_it() -> None:
    """Three gateways over their targets each took their share of the free room while
    the short one took it all: the room was drawn twice (1,510 overshoots at 4u, 200 ms
    service, 384 clients). Now the short ones split it by want and the rest keep what
    they hold."""
    over = _site(share=0.2, wanted=4.0, want=0.0)  # target 25.6, holds 28
    ((_, kept, _, _),) = settle([(0, over)])
    assert kept == 28.0  # keeps what it holds, takes none of the free room
    short = _site(base=46.4, held=46.0, share=0.4, wanted=4.0, want=4.0)  # target 51.2
    ((_, took, _, _),) = settle([(0, short)])
    assert took == pytest.approx(49.0)  # all 3 free slots: it is the only one wanting
    half = _site(base=46.4, held=46.0, share=0.4, wanted=8.0, want=4.0)
    ((_, part, _, _),) = settle([(0, half)])
    assert part == pytest.approx(47.5)  # another wants as much: half of them each
    fresh = _site(base=46.4, held=46.0, share=0.4, wanted=4.0, want=4.0, idle=0)
    ((_, base, _, _),) = settle([(0, fresh)])
    assert base == pytest.approx(46.4)  # the newest sample's room is its owners' to refill


def test_want_missing_from_the_sums_splits_nothing() -> None:
    """An operator or transport that does not carry `want` leaves this gateway's own out
    of the sums: read alone it would claim all the free room."""
    mine = DemandReport({"a/p": 5}, {"a/p": 5}, {"a/p": 3})
    load = GatewayLoad({"a/p": 40.0}, 2, {"a/p": 20}, {"a/p": 5.0}, {"a/p": 5.0}, mine)
    d = load.site_demand("a/p", 20)
    assert d is not None and d.wanted == 0.0 and d.want == 0.0
    carried = GatewayLoad(
        {"a/p": 40.0}, 2, {"a/p": 20}, {"a/p": 5.0}, {"a/p": 5.0}, mine, {"a/p": 7.0}
    )
    d = carried.site_demand("a/p", 20)
    assert d is not None and (d.wanted, d.want) == (7.0, 3.0)


def test_a_peer_that_lies_about_its_want_cannot_keep_room_idle() -> None:
    """A peer that claims to want a site's free room leaves the honest gateways a
    sliver of it each; the room it never takes is refilled at the fair share's budget
    after `LIFT_AFTER` samples, and after `LIFT_AFTER_WANTED` want is not followed
    there for a while."""

    def at(n: int) -> Following:  # short of its target (51.2), wanting 4 of 500 claimed
        return Following(46.4, 46.0, 3.0, 128.0, 0.4, n, wanted=500.0, want=4.0)

    ((_, sliver, _, _),) = settle([(0, at(1))])
    assert sliver == pytest.approx(46.0 + 3.0 * 4.0 / 500.0)
    ((_, share, _, lift),) = settle([(0, at(LIFT_AFTER))])
    assert share == pytest.approx(46.4) and not lift
    ((_, share, _, lift),) = settle([(0, at(LIFT_AFTER_WANTED))])
    assert share == pytest.approx(46.4) and lift
