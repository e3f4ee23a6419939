"""The request flow as exact step sequences (core/flow.py's transition table), and
hypothesis properties: it terminates, never attempts a candidate twice, holds only
before its first attempt, and ends in exactly one terminal step."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridroute.core import AvailabilitySettings, Health, Outcome, Path, Policy
from gridroute.core.flow import (
    FAILURES,
    Answered,
    Attempt,
    Failure,
    FlowError,
    GiveUp,
    Hold,
    Refuse,
    Relay,
    Wake,
    request_flow,
)

from .flow_driver import FakeGrid, run_flow
from .grid_builder import Grid, Site


def two_sites(**settings: object) -> tuple[Grid, FakeGrid]:
    g = Grid([Site("a"), Site("b")], AvailabilitySettings(**settings))  # type: ignore[arg-type]
    return g, FakeGrid(g.refresh(1.0), g.own)


def attempts(steps: list[object]) -> list[tuple[str, int]]:
    return [(s.view.site, s.number) for s in steps if isinstance(s, Attempt)]


def test_served_at_once_is_relayed() -> None:
    _, fg = two_sites()
    steps = run_flow(fg, [Answered(200)])
    assert attempts(steps) == [("a", 1)]
    assert isinstance(steps[-1], Relay) and steps[-1].status == 200
    assert steps[0].after is None  # type: ignore[union-attr]


@pytest.mark.parametrize("failure", [f for f, (retried, _) in FAILURES.items() if retried])
def test_a_failure_before_the_answer_is_retried_once_on_another_site(failure: Failure) -> None:
    _, fg = two_sites()
    steps = run_flow(fg, [failure, Answered(200)])
    assert attempts(steps) == [("a", 1), ("b", 2)]
    assert steps[1].after == ("a", failure.value)  # type: ignore[union-attr]
    assert isinstance(steps[-1], Relay) and steps[-1].decision.view.site == "b"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("failure", "status"),
    [(Failure.CONNECT_FAILED, 502), (Failure.CONNECT_TIMEOUT, 504), (Failure.RESET, 502)],
)
def test_the_retry_failing_too_gives_up_with_502_or_504(failure: Failure, status: int) -> None:
    _, fg = two_sites()
    steps = run_flow(fg, [Failure.CONNECT_FAILED, failure])
    assert attempts(steps) == [("a", 1), ("b", 2)]
    last = steps[-1]
    assert isinstance(last, GiveUp) and (last.status, last.failure) == (status, failure)


@pytest.mark.parametrize(("failure", "status"), [(f, s) for f, (_, s) in FAILURES.items()])
def test_nowhere_else_to_go_gives_up_at_once(failure: Failure, status: int) -> None:
    g = Grid([Site("only")])
    steps = run_flow(FakeGrid(g.refresh(1.0), g.own), [failure])
    assert attempts(steps) == [("only", 1)]
    assert isinstance(steps[-1], GiveUp) and steps[-1].status == status


@pytest.mark.parametrize("failure", [Failure.READ_TIMEOUT, Failure.BROKEN])
def test_a_read_timeout_or_broken_answer_is_not_retried(failure: Failure) -> None:
    _, fg = two_sites()
    steps = run_flow(fg, [failure])
    assert attempts(steps) == [("a", 1)]
    assert isinstance(steps[-1], GiveUp)


@pytest.mark.parametrize("status", [429, 503])
def test_a_busy_answer_is_retried_and_relayed_when_the_retry_is_busy_too(status: int) -> None:
    _, fg = two_sites()
    steps = run_flow(fg, [Answered(status), Answered(status)])
    assert attempts(steps) == [("a", 1), ("b", 2)]
    assert steps[1].after == ("a", f"status_{status}")  # type: ignore[union-attr]
    assert isinstance(steps[-1], Relay) and steps[-1].status == status


@pytest.mark.parametrize("status", [400, 500, 502, 504])
def test_other_answers_are_relayed_as_they_are(status: int) -> None:
    _, fg = two_sites()
    steps = run_flow(fg, [Answered(status)])
    assert attempts(steps) == [("a", 1)]
    assert isinstance(steps[-1], Relay) and steps[-1].status == status


def test_the_retry_decides_on_the_requests_original_snapshot() -> None:
    g, fg = two_sites()
    original = fg.snapshot
    flow = request_flow(fg, "m", Policy.FIRST)
    first = next(flow)
    assert isinstance(first, Attempt) and first.snapshot is original
    # A newer snapshot in which b is demoted: the retry still reads the original one.
    fg.snapshot = g.refresh(2.0, health={"b/p": Health.DOWN})
    retry = flow.send(Failure.CONNECT_FAILED)
    assert isinstance(retry, Attempt) and retry.view.site == "b"
    assert retry.snapshot is original and retry.decision.path is Path.FIRST


def all_down() -> FakeGrid:
    g = Grid([Site("a"), Site("b")])
    return FakeGrid(g.refresh(1.0, health={"a/p": Health.DOWN, "b/p": Health.DOWN}), g.own)


@pytest.mark.parametrize("failure", [f for f, (retried, _) in FAILURES.items() if retried])
def test_every_site_down_last_resorts_that_fail_refuse_with_503(failure: Failure) -> None:
    """Seed: with every site judged down the front candidate is tried as a last resort;
    when it (and the retry) never answer, that is 503 no site + Retry-After, not 502/504."""
    steps = run_flow(all_down(), [failure, failure])
    assert [s.decision.path for s in steps if isinstance(s, Attempt)] == [Path.LAST_RESORT] * 2
    last = steps[-1]
    assert isinstance(last, GiveUp) and (last.status, last.failure) == (503, failure)
    assert last.retry_after_s in (3, 4, 5, 6, 7)


@pytest.mark.parametrize(
    ("failure", "status"), [(Failure.READ_TIMEOUT, 504), (Failure.BROKEN, 502)]
)
def test_a_last_resort_that_was_reached_keeps_its_gateway_error(
    failure: Failure, status: int
) -> None:
    """A backend that took the request and then timed out may have done the work: 504."""
    steps = run_flow(all_down(), [failure])
    last = steps[-1]
    assert isinstance(last, GiveUp) and last.status == status and last.retry_after_s is None


@pytest.mark.parametrize(
    ("sites", "model", "policy", "status", "outcome"),
    [
        ([Site("a")], "unknown", Policy.GRIDROUTE, 404, Outcome.UNKNOWN_MODEL),
        ([Site("a", ready=0.0)], "m", Policy.GRIDROUTE, 503, Outcome.NO_SITE),
    ],
)
def test_no_route_refuses(sites, model, policy, status, outcome) -> None:
    g = Grid(sites)
    steps = run_flow(FakeGrid(g.refresh(1.0), g.own), [], policy, model)
    (only,) = steps
    assert isinstance(only, Refuse) and (only.status, only.decision.outcome) == (status, outcome)


def test_a_shed_model_refuses_with_429() -> None:
    settings_ = AvailabilitySettings(shedding=True, full_after_ms=0, room_after_ms=0)
    g = Grid([Site("a", running=100, waiting=5, max_running=10)], settings_)
    g.refresh(1.0)
    snap = g.refresh(2.0)
    assert "m" in snap.shedding
    (only,) = run_flow(FakeGrid(snap, g.own), [], Policy.SATURATION)
    assert isinstance(only, Refuse) and only.status == 429 and only.decision.retry_after_s


def full_grid(**settings: object) -> tuple[Grid, FakeGrid]:
    """Two one-slot sites each holding one of this gateway's requests: no room anywhere."""
    s = AvailabilitySettings(ceiling_floor=1, max_queue_ms=2000, **settings)  # type: ignore[arg-type]
    g = Grid([Site("a", running=1, max_running=1), Site("b", running=1, max_running=1)], s)
    g.own.start("a/p", 0.5)
    g.own.start("b/p", 0.5)
    return g, FakeGrid(g.refresh(1.0), g.own)


def test_hold_until_woken_with_room_then_attempt_on_the_newest_snapshot() -> None:
    g, fg = full_grid()
    flow = request_flow(fg, "m", Policy.GRIDROUTE)
    hold = next(flow)
    assert isinstance(hold, Hold) and hold.deadline == fg.now + 2.0
    fg.now += 0.5
    again = flow.send(Wake.WOKE)  # nothing ended: still no room, same deadline
    assert isinstance(again, Hold) and again.deadline == hold.deadline
    g.own.end("b/p", fg.now)
    g.sites[1].running = 0
    fg.snapshot = newest = g.refresh(fg.now)
    step = flow.send(Wake.WOKE)
    assert isinstance(step, Attempt) and step.view.site == "b" and step.snapshot is newest


@pytest.mark.parametrize("overflow", ["forward", "shed"])
def test_an_expired_hold_forwards_or_sheds(overflow: str) -> None:
    _, fg = full_grid(queue_overflow=overflow)
    flow = request_flow(fg, "m", Policy.GRIDROUTE)
    assert isinstance(next(flow), Hold)
    fg.now += 2.0
    step = flow.send(Wake.EXPIRED)
    if overflow == "shed":
        assert isinstance(step, Refuse) and step.status == 429
    else:
        assert isinstance(step, Attempt) and step.decision.path in (Path.QUEUE_TIE, Path.SATURATED)


def test_a_retry_never_holds() -> None:
    g, fg = full_grid()
    g.own.end("a/p", 1.0)  # room at a only
    g.sites[0].running = 0
    fg.snapshot = g.refresh(2.0)
    flow = request_flow(fg, "m", Policy.GRIDROUTE)
    first = next(flow)
    assert isinstance(first, Attempt) and first.view.site == "a"
    retry = flow.send(Failure.CONNECT_FAILED)  # b has no room: overflow, not a hold
    assert isinstance(retry, Attempt) and retry.view.site == "b"


def test_wrong_feeds_are_driver_bugs() -> None:
    _, fg = two_sites()
    flow = request_flow(fg, "m", Policy.FIRST)
    next(flow)
    with pytest.raises(FlowError):
        flow.send(Wake.WOKE)
    _, fg = full_grid()
    flow = request_flow(fg, "m", Policy.GRIDROUTE)
    next(flow)
    with pytest.raises(FlowError):
        flow.send(Answered(200))


def test_nothing_follows_a_terminal_step() -> None:
    _, fg = two_sites()
    flow = request_flow(fg, "m", Policy.FIRST)
    next(flow)
    assert isinstance(flow.send(Answered(200)), Relay)
    with pytest.raises(StopIteration):
        flow.send(Answered(200))


# -- properties -------------------------------------------------------------------------

site_st = st.builds(
    Site,
    name=st.just("x"),
    running=st.floats(0, 20),
    waiting=st.sampled_from([0.0, 0.0, 2.0]),
    ready=st.sampled_from([0.0, 1.0, 1.0, 2.0]),
    max_running=st.sampled_from([1.0, 4.0, 10.0]),
    measured=st.booleans(),
)
feed_st = st.one_of(
    st.sampled_from(list(Failure)),
    st.builds(Answered, st.sampled_from([200, 400, 429, 500, 502, 503, 504])),
)


@settings(max_examples=300, deadline=None)
@given(
    sites=st.lists(site_st, min_size=1, max_size=4),
    policy=st.sampled_from(list(Policy)),
    max_queue_ms=st.sampled_from([0, 1000]),
    shedding=st.booleans(),
    own=st.lists(st.integers(0, 3), min_size=4, max_size=4),
    ejected_first=st.booleans(),
    script=st.lists(st.one_of(feed_st, st.sampled_from(list(Wake))), min_size=0, max_size=12),
    seed=st.integers(0, 2**16),
)
def test_every_request_terminates_once_without_repeating_a_candidate(
    sites, policy, max_queue_ms, shedding, own, ejected_first, script, seed
) -> None:
    for i, s in enumerate(sites):
        s.name = f"s{i}"
    settings_ = AvailabilitySettings(
        max_queue_ms=max_queue_ms, shedding=shedding, ceiling_floor=1, eject_after_failures=1
    )
    g = Grid(sites, settings_)
    for i in range(len(sites)):
        for _ in range(own[i]):
            g.own.start(f"s{i}/p", 0.5)
    fg = FakeGrid(g.refresh(1.0), g.own)
    fg.rng.seed(seed)
    if ejected_first:
        fg.ejections.record("s0/p", False, fg.now, settings_)
    flow = request_flow(fg, "m", policy)
    step = next(flow)
    seen: list[str] = []
    feeds = iter(script)
    for _ in range(50):
        if step.terminal:
            break
        if isinstance(step, Hold):
            assert not seen, "a request holds only before its first attempt"
            fed = next(feeds, Wake.EXPIRED)
            if not isinstance(fed, Wake):
                fed = Wake.EXPIRED
            fg.now = step.deadline if fed is Wake.EXPIRED else fg.now
        else:
            assert isinstance(step, Attempt)
            assert step.view.key not in seen, "never the same candidate twice"
            assert step.number == len(seen) + 1 <= 2
            seen.append(step.view.key)
            fed = next(feeds, Answered(200))
            if isinstance(fed, Wake):
                fed = Answered(200)
        step = flow.send(fed)
    else:
        pytest.fail("the flow did not terminate")
    assert isinstance(step, Relay | Refuse | GiveUp)
    if isinstance(step, Relay | GiveUp):
        assert seen, "a relayed answer or a give-up follows an attempt"
    with pytest.raises(StopIteration):
        flow.send(Answered(200))
