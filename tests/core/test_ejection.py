"""Passive outlier ejection (core/ejection.py) on its own and inside the request flow."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gridroute.core import AvailabilitySettings, Health, Path, Policy
from gridroute.core.ejection import Ejections
from gridroute.core.flow import Answered, Attempt, Failure, Relay, request_flow

from .flow_driver import FakeGrid, run_flow
from .grid_builder import Grid, Site

S = AvailabilitySettings()  # 5 errors, 5 s first ejection, at most 60 s


def fail(e: Ejections, n: int, now: float, key: str = "a") -> list[bool]:
    return [e.record(key, False, now, S) for _ in range(n)]


def test_five_consecutive_errors_eject_at_once() -> None:
    e = Ejections()
    assert fail(e, 5, 1.0) == [False, False, False, False, True]
    assert e.out(1.0) == {"a"} and e.until("a") == 6.0
    assert e.total == {"a": 1}


def test_a_success_between_errors_resets_the_count() -> None:
    e = Ejections()
    fail(e, 4, 1.0)
    assert not e.record("a", True, 1.0, S)
    assert fail(e, 4, 1.0) == [False] * 4
    assert e.out(1.0) == frozenset()


def test_a_busy_429_is_not_an_error_but_a_503_is() -> None:
    """Inside the flow: 429 resets the count, 503 (like 502/504) adds to it."""
    g = Grid([Site("a"), Site("b")])
    fg = FakeGrid(g.refresh(1.0), g.own)
    for _ in range(4):
        run_flow(fg, [Answered(503), Answered(200)])
    run_flow(fg, [Answered(429), Answered(200)])
    for _ in range(4):
        run_flow(fg, [Answered(503), Answered(200)])
    assert fg.ejections.out(fg.now) == frozenset()
    run_flow(fg, [Answered(503), Answered(200)])
    assert fg.ejections.out(fg.now) == {"a/p"}


def test_errors_while_ejected_change_nothing_and_expiry_puts_it_on_probation() -> None:
    e = Ejections()
    fail(e, 5, 1.0)
    assert fail(e, 20, 2.0) == [False] * 20  # requests sent before the ejection
    assert e.out(5.999) == {"a"} and e.out(6.0) == frozenset()
    # On probation: one error ejects again, for twice as long, then four times ...
    assert fail(e, 1, 6.0) == [True] and e.until("a") == 16.0
    assert fail(e, 1, 16.0) == [True] and e.until("a") == 36.0
    # ... never longer than eject_max_ms.
    now = 36.0
    for _ in range(6):
        fail(e, 1, now)
        until = e.until("a")
        assert until is not None and until - now <= 60.0
        now = until
    assert e.until("a") == now  # the last one lasted the cap: 60 s
    assert e.total == {"a": 9}


def test_a_success_after_the_ejection_ends_the_episode() -> None:
    e = Ejections()
    fail(e, 5, 1.0)
    e.record("a", True, 3.0, S)  # a request in flight since before: not the end
    assert fail(e, 1, 6.0) == [True] and e.until("a") == 16.0
    e.record("a", True, 16.0, S)
    assert fail(e, 4, 17.0) == [False] * 4 and fail(e, 1, 17.0) == [True]
    assert e.until("a") == 22.0  # back to the 5 s of a first ejection


def test_zero_turns_ejection_off() -> None:
    off = AvailabilitySettings(eject_after_failures=0)
    e = Ejections()
    assert not any(e.record("a", False, 1.0, off) for _ in range(100))
    assert e.out(1.0) == frozenset()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.floats(0, 5)), max_size=60))
def test_ejections_last_between_base_and_max(events) -> None:
    e = Ejections()
    now = 0.0
    for ok, dt in events:
        now += dt
        if e.record("a", ok, now, S):
            until = e.until("a")
            assert until is not None and 5.0 - 1e-9 <= until - now <= 60.0 + 1e-9
    errors = sum(1 for ok, _ in events if not ok)
    assert e.total.get("a", 0) <= errors


# -- inside the flow ---------------------------------------------------------------------


def test_an_ejected_site_is_skipped_and_counted_demoted() -> None:
    g = Grid([Site("a"), Site("b")])
    fg = FakeGrid(g.refresh(1.0), g.own)
    for _ in range(5):  # policy first: each tries a, fails, is retried on b
        steps = run_flow(fg, [Failure.CONNECT_FAILED, Answered(200)])
        assert [s.view.site for s in steps if isinstance(s, Attempt)] == ["a", "b"]
    steps = run_flow(fg, [Answered(200)])
    first = steps[0]
    assert isinstance(first, Attempt) and first.view.site == "b" and first.after is None
    assert ("a", "demoted") in first.decision.refused
    # Once the ejection is over, a is the front candidate again.
    fg.now += 5.0
    steps = run_flow(fg, [Answered(200)])
    assert isinstance(steps[0], Attempt) and steps[0].view.site == "a"


def test_ejected_everywhere_the_pick_is_a_last_resort() -> None:
    g = Grid([Site("a"), Site("b")])
    fg = FakeGrid(g.refresh(1.0), g.own)
    for key in ("a/p", "b/p"):
        for _ in range(5):
            fg.ejections.record(key, False, fg.now, S)
    flow = request_flow(fg, "m", Policy.GRIDROUTE)
    step = next(flow)
    assert isinstance(step, Attempt) and step.decision.path is Path.LAST_RESORT
    assert isinstance(flow.send(Answered(200)), Relay)


def test_on_probation_one_trial_at_a_time() -> None:
    e = Ejections()
    fail(e, 5, 1.0)
    assert e.out(6.0) == frozenset()
    e.sent("a", 6.0)  # the trial: every other request keeps away until it is answered
    assert e.out(6.5) == {"a"}
    e.abandon("a")  # its client went away: no evidence either way
    assert e.out(6.5) == frozenset()
    e.sent("a", 6.5)
    assert e.record("a", False, 8.5, S)  # a 2 s connect timeout: ejected for 10 s
    assert e.out(18.4) == {"a"} and e.out(18.5) == frozenset()


def test_signals_and_probes_decide_the_return() -> None:
    """Judged down (here: probe-demoted) during the ejection, then up again: back at once,
    without waiting for the backoff, and the next ejection is a first one again."""
    g = Grid([Site("a"), Site("b")])
    e = Ejections()
    fail(e, 5, 1.0, key="a/p")
    assert e.out(2.0, g.refresh(2.0)) == {"a/p"}  # still up by its signals: stays out
    assert e.out(3.0, g.refresh(3.0, health={"a/p": Health.DOWN})) == {"a/p"}
    assert e.out(3.5, g.refresh(3.5, health={"a/p": Health.UP})) == frozenset()
    assert e.until("a/p") is None
    assert fail(e, 5, 4.0, key="a/p")[-1] and e.until("a/p") == 9.0


def test_an_older_snapshot_does_not_undo_a_newer_one() -> None:
    g = Grid([Site("a"), Site("b")])
    e = Ejections()
    fail(e, 5, 1.0, key="a/p")
    old = g.refresh(2.0)
    e.out(3.0, g.refresh(3.0, health={"a/p": Health.DOWN}))
    assert e.out(3.0, old) == {"a/p"}  # a retry reading its request's older snapshot


def test_a_flow_closed_during_its_trial_frees_it() -> None:
    g = Grid([Site("a"), Site("b")])
    fg = FakeGrid(g.refresh(1.0), g.own)
    for _ in range(5):
        run_flow(fg, [Failure.CONNECT_FAILED, Answered(200)])
    fg.now += 5.0
    flow = request_flow(fg, "m", Policy.FIRST)
    trial = next(flow)
    assert isinstance(trial, Attempt) and trial.view.site == "a"
    assert fg.ejections.out(fg.now) == {"a/p"}
    flow.close()
    assert fg.ejections.out(fg.now) == frozenset()


def test_a_request_sent_before_the_errors_succeeding_resets_nothing() -> None:
    """A site that fails new requests while it finishes those it had (the demo's
    partition: 503 at once, requests in service complete): still five errors in a row."""
    e = Ejections()
    for i in range(4):
        e.record("a", False, 10.0 + i, S, sent_at=10.0 + i)
        assert not e.record("a", True, 10.5 + i, S, sent_at=5.0)  # sent at 5 s, in service
    assert e.record("a", False, 14.0, S, sent_at=14.0)
    e2 = Ejections()
    fail(e2, 4, 10.0)
    e2.record("a", True, 11.0, S, sent_at=10.5)  # sent after the errors: the site works
    assert fail(e2, 4, 12.0) == [False] * 4
