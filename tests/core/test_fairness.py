"""Fair admission past capacity (core/fairness.py), alone and inside the request flow."""

from __future__ import annotations

from random import Random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridroute.config import ConfigError
from gridroute.core import AvailabilitySettings, Outcome, Policy
from gridroute.core.fairness import FairAdmission, FairnessTable
from gridroute.core.flow import Answered, Attempt, Hold, Refuse, Wake, request_flow
from gridroute.sim.scenario import parse_scenario

from .flow_driver import FakeGrid
from .grid_builder import Grid, Site

S = AvailabilitySettings(shedding=True, fair_keys=8, fair_key_ttl_ms=10_000)


def test_a_flood_of_distinct_keys_never_grows_the_table_past_its_bound() -> None:
    table = FairnessTable()
    for i in range(10_000):
        table.admitted(f"key-{i}", float(i) * 0.001, S)
        assert len(table) <= S.fair_keys
    assert "key-9999" in table and "key-0" not in table  # the oldest seen went first


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.booleans()), max_size=200))
def test_the_table_bound_holds_for_any_mix_of_admissions_and_refusals(
    events: list[tuple[int, bool]],
) -> None:
    table = FairnessTable()
    for t, (k, served) in enumerate(events):
        (table.admitted if served else table.refused)(f"k{k}", float(t), S)
        assert len(table) <= S.fair_keys
        assert 0 <= table.refused_keys <= len(table)


def test_a_key_unseen_past_its_ttl_is_forgotten_and_ranks_as_never_served() -> None:
    table = FairnessTable()
    table.admitted("a", 0.0, S)
    assert table.standing("a", 1.0, S) > 0.0
    assert table.standing("a", 11.0, S) == 0.0
    assert "a" not in table


def test_served_scores_decay_by_half_per_half_life() -> None:
    s = AvailabilitySettings(fair_half_life_ms=10_000)
    table = FairnessTable()
    table.admitted("a", 0.0, s)
    assert table.standing("a", 10.0, s) == pytest.approx(0.5)


def test_a_refused_key_ranks_ahead_of_one_just_served() -> None:
    table = FairnessTable()
    for key in ("a", "b"):
        table.admitted(key, 0.0, S)
    table.admitted("a", 1.0, S)
    table.refused("b", 1.0, S)
    assert table.standing("b", 2.0, S) < table.standing("a", 2.0, S)


def full_grid(**extra: object) -> tuple[Grid, FakeGrid]:
    """One site with 8 slots, all held by this gateway: no room until one ends."""
    g = Grid([Site("a", running=8.0, max_running=8.0)], S.model_copy(update=extra))
    for _ in range(8):
        g.own.start("a/p", 0.5)
    fg = FakeGrid(g.refresh(1.0), g.own)
    return g, fg


def test_in_the_flow_a_refused_key_is_admitted_before_a_just_served_key() -> None:
    g, fg = full_grid()
    fg.fairness.table.admitted("served", 9.0, S)  # answered just now
    fg.fairness.table.refused("refused", 5.0, S)  # came back after its Retry-After
    early = request_flow(fg, "m", Policy.GRIDROUTE, client="served")
    late = request_flow(fg, "m", Policy.GRIDROUTE, client="refused")
    assert isinstance(next(early), Hold) and isinstance(next(late), Hold)
    g.own.end("a/p", 10.5)  # a slot frees: both are woken, the first one first
    fg.now = 10.5
    assert isinstance(early.send(Wake.WOKE), Hold)  # it waited longer, but ranks behind
    step = late.send(Wake.WOKE)
    assert isinstance(step, Attempt)
    g.own.start("a/p", 10.5)
    fg.now = 11.5
    last = early.send(Wake.EXPIRED)
    assert isinstance(last, Refuse) and last.status == 429
    assert fg.fairness.table.streak("served") == 1 and fg.fairness.table.streak("refused") == 0
    assert fg.fairness.waiting("m") == 0


def test_a_new_request_does_not_take_a_free_slot_ahead_of_a_waiter_ranked_first() -> None:
    g, fg = full_grid()
    waiter = request_flow(fg, "m", Policy.GRIDROUTE, client="w")
    assert isinstance(next(waiter), Hold)
    g.own.end("a/p", 10.0)  # room now, but the waiter has not been woken yet
    fg.fairness.table.admitted("fresh", 10.0, S)
    newcomer = request_flow(fg, "m", Policy.GRIDROUTE, client="fresh")
    assert isinstance(next(newcomer), Hold)
    assert isinstance(waiter.send(Wake.WOKE), Attempt)


def test_a_closed_flow_leaves_the_waiters() -> None:
    _, fg = full_grid()
    flow = request_flow(fg, "m", Policy.GRIDROUTE, client="gone")
    assert isinstance(next(flow), Hold)
    assert fg.fairness.waiting("m") == 1
    flow.close()  # the client went away
    assert fg.fairness.waiting("m") == 0


def test_fair_order_off_refuses_at_once_as_before() -> None:
    _, fg = full_grid(fair_order=False)
    step = next(request_flow(fg, "m", Policy.GRIDROUTE, client="k"))
    assert isinstance(step, Refuse) and step.decision.outcome is Outcome.SHED


def test_without_a_key_the_flow_is_unchanged() -> None:
    _, fg = full_grid()
    step = next(request_flow(fg, "m", Policy.GRIDROUTE))
    assert isinstance(step, Refuse) and step.status == 429


def test_retry_after_stays_in_its_bounds_and_spreads() -> None:
    fair = FairAdmission()
    s = AvailabilitySettings(retry_after_min_s=2, retry_after_max_s=10)
    rng = Random(7)
    for i in range(200):  # a busy model: about 40 admissions a second
        fair.table.admitted(f"k{i}", i * 0.025, s)
        fair.settle(_routed(), "m", f"k{i}", i * 0.025, s, rng)
    seen = {fair.retry_after_s("m", 5.0, s, rng) for _ in range(200)}
    assert seen <= set(range(2, 11)) and len(seen) >= 2


def _routed():  # type: ignore[no-untyped-def]
    from gridroute.core import Decision, Path

    return Decision(Outcome.ROUTE, Path.SINGLE)


def test_retry_after_bounds_out_of_order_name_the_fields() -> None:
    with pytest.raises(ConfigError) as err:
        parse_scenario({"availability": {"retry_after_min_s": 9, "retry_after_max_s": 4}})
    assert "retry_after_min_s" in str(err.value) and "retry_after_max_s" in str(err.value)


def _answer(fg: FakeGrid, key: str) -> None:
    flow = request_flow(fg, "m", Policy.GRIDROUTE, client=key)
    assert isinstance(next(flow), Attempt)
    flow.send(Answered(200))


def test_an_answered_flow_while_others_were_refused_counts_one_admission() -> None:
    g = Grid([Site("a", running=0.0, max_running=4.0)], S)
    fg = FakeGrid(g.refresh(1.0), g.own)
    fg.fairness.settle(_shed(), "m", "other", fg.now, S, Random(1))  # the model is contended
    _answer(fg, "k")
    assert fg.fairness.table.standing("k", fg.now, S) == pytest.approx(1.0)


def test_an_admission_nobody_else_wanted_adds_nothing_to_the_score() -> None:
    """Under capacity nobody is deprived: a client served all through a quiet spell does
    not rank behind the newcomers of a surge (DRR forgets an idle flow's deficit too)."""
    g = Grid([Site("a", running=0.0, max_running=4.0)], S)
    fg = FakeGrid(g.refresh(1.0), g.own)
    for _ in range(3):
        _answer(fg, "steady")
    assert fg.fairness.table.standing("steady", fg.now, S) == 0.0
    assert not fg.fairness.contended("m", fg.now, S)


def test_contention_lasts_as_long_as_a_refused_client_may_stay_away() -> None:
    fair = FairAdmission()
    fair.settle(_shed(), "m", "k", 10.0, S, Random(1))
    assert fair.contended("m", 10.0 + S.retry_after_max_s, S)
    assert not fair.contended("m", 10.5 + S.retry_after_max_s, S)
    assert not fair.contended("other-model", 10.0, S)
    ticket = fair.join("m", "k", 30.0)  # a waiter: contended while it waits
    assert fair.contended("m", 100.0, S)
    fair.leave("m", ticket, 100.0)  # and from the end of its wait, however long
    assert fair.contended("m", 100.0 + S.retry_after_max_s, S)
    assert not fair.contended("m", 100.5 + S.retry_after_max_s, S)


def _shed():  # type: ignore[no-untyped-def]
    from gridroute.core import Decision, Path

    return Decision(Outcome.SHED, Path.SHED)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 3)), min_size=1, max_size=20),
    st.data(),
)
def test_exactly_one_waiter_ranks_first_and_it_has_the_lowest_standing(
    waiters: list[tuple[int, int]], data: st.DataObject
) -> None:
    fair = FairAdmission()
    for k, served in waiters:
        for _ in range(served):
            fair.table.admitted(f"k{k}", 0.0, S)
    tickets = [(fair.join("m", f"k{k}", float(i)), f"k{k}") for i, (k, _) in enumerate(waiters)]
    gone = data.draw(st.sets(st.sampled_from([t for t, _ in tickets])))
    for t in gone:
        fair.leave("m", t)
    left = [(t, key) for t, key in tickets if t not in gone]
    firsts = [(t, key) for t, key in left if fair.first("m", key, t, 1.0, S)]
    if not left:
        assert not firsts and fair.waiting("m") == 0
        return
    assert len(firsts) == 1
    lowest = min(fair.table.standing(key, 1.0, S) for _, key in left)
    assert fair.table.standing(firsts[0][1], 1.0, S) == lowest
