"""The request flow under a routing overlay (core/overlay_request.py driving core/flow.py):
retry in the group and fall-through are steps of the one flow, at most `max_attempts`,
one terminal step, every attempt's outcome recorded for ejection."""

from __future__ import annotations

from random import Random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridroute.core import AvailabilitySettings, Outcome, Path, Policy
from gridroute.core.flow import (
    Answered,
    Attempt,
    Failure,
    Feed,
    GiveUp,
    Refuse,
    Relay,
    Step,
    request_flow,
)
from gridroute.core.group_route import Group, ModelGroups, OverlayIndex, Slot, build_table
from gridroute.core.group_route import Step as GroupStep
from gridroute.core.groups import Admission
from gridroute.core.overlay_request import OverlayRequest
from gridroute.core.pickers import Picker, PickerStates

from .flow_driver import FakeGrid
from .grid_builder import MODEL, Grid, Site

NEW = Admission.NEW_AND_EXISTING
DRAIN = Admission.EXISTING_ONLY


def _grid(names: str, **settings_: object) -> FakeGrid:
    g = Grid([Site(n) for n in names], AvailabilitySettings(**settings_))  # type: ignore[arg-type]
    return FakeGrid(g.refresh(1.0), g.own)


def _overlay(
    *groups: tuple[Admission, str],
    picker: Picker = Picker.DETERMINISTIC,
    max_attempts: int = 4,
    states: PickerStates | None = None,
    session: bool = False,
    bound: str | None = None,
) -> OverlayRequest:
    gs = tuple(
        Group(i, adm, tuple(Slot(s, "p") for s in sites)) for i, (adm, sites) in enumerate(groups)
    )
    index = OverlayIndex(1, "d1", {MODEL: ModelGroups(MODEL, picker, gs)})
    return OverlayRequest(
        build_table(index),
        PickerStates() if states is None else states,
        session,
        bound,
        max_attempts,
    )


def _run(fg: FakeGrid, ov: OverlayRequest, feeds: list[Feed], model: str = MODEL) -> list[Step]:
    flow = request_flow(fg, model, Policy.GRIDROUTE, overlay=ov)
    steps = [next(flow)]
    for fed in feeds:
        assert not steps[-1].terminal
        steps.append(flow.send(fed))
    assert steps[-1].terminal, steps[-1]
    return steps


def _tried(steps: list[Step]) -> list[tuple[str, str]]:
    out = []
    for s in steps:
        if isinstance(s, Attempt):
            assert s.choice is not None
            out.append((s.view.site, s.choice.step.value))
    return out


def test_retry_stays_in_the_group_then_falls_through_in_one_flow() -> None:
    fg = _grid("abcz")
    ov = _overlay((NEW, "abc"), (NEW, "z"))
    feeds: list[Feed] = [Failure.CONNECT_FAILED, Answered(503), Failure.RESET, Answered(200)]
    steps = _run(fg, ov, feeds)
    assert _tried(steps) == [
        ("a", "first"),
        ("b", "in_group"),
        ("c", "in_group"),
        ("z", "fell_through"),
    ]
    assert [s.after for s in steps if isinstance(s, Attempt)][1:] == [
        ("a", "connect_failed"),
        ("b", "status_503"),
        ("c", "reset"),
    ]
    last = steps[-1]
    assert isinstance(last, Relay) and last.status == 200
    assert all(s.decision.path is Path.OVERLAY for s in steps if isinstance(s, Attempt))


def test_attempts_stop_at_max_attempts() -> None:
    fg = _grid("abcz")
    steps = _run(fg, _overlay((NEW, "abc"), (NEW, "z"), max_attempts=2), [Answered(429)] * 2)
    assert _tried(steps) == [("a", "first"), ("b", "in_group")]
    assert isinstance(steps[-1], Relay) and steps[-1].status == 429  # the answer in hand
    steps = _run(fg, _overlay((NEW, "ab"), max_attempts=3), [Failure.CONNECT_TIMEOUT] * 2)
    assert isinstance(steps[-1], GiveUp) and steps[-1].status == 504  # nothing left to try


def test_a_read_timeout_is_not_retried_under_the_overlay_either() -> None:
    steps = _run(_grid("ab"), _overlay((NEW, "ab")), [Failure.READ_TIMEOUT])
    assert isinstance(steps[-1], GiveUp) and steps[-1].status == 504
    assert len(_tried(steps)) == 1


def test_no_viable_group_refuses_503_and_an_unnamed_model_404() -> None:
    fg = _grid("ab")
    (only,) = _run(fg, _overlay((DRAIN, "ab")), [])
    assert isinstance(only, Refuse) and only.status == 503 and only.decision.retry_after_s
    assert only.choice is not None and only.choice.step is GroupStep.NONE
    (only,) = _run(fg, _overlay((NEW, "ab")), [], model="other")
    assert isinstance(only, Refuse) and only.status == 404
    assert only.decision.outcome is Outcome.UNKNOWN_MODEL


def test_a_bound_session_is_reused_and_fails_over_inside_the_flow() -> None:
    fg = _grid("abz")
    ov = _overlay((NEW, "ab"), (NEW, "z"), session=True, bound="b/p")
    steps = _run(fg, ov, [Failure.CONNECT_FAILED, Answered(200)])
    choices = [s.choice for s in steps if isinstance(s, Attempt)]
    assert [(c.slot.site, c.affinity.value, c.step.value) for c in choices if c and c.slot] == [
        ("b", "reused", "bound"),
        ("a", "failed_over", "in_group"),
    ]


def test_round_robin_positions_advance_across_requests() -> None:
    fg = _grid("abc")
    states = PickerStates()
    got = []
    for _ in range(6):
        steps = _run(
            fg, _overlay((NEW, "abc"), picker=Picker.ROUND_ROBIN, states=states), [Answered(200)]
        )
        got.append(_tried(steps)[0][0])
    assert got == ["a", "b", "c", "a", "b", "c"]


def test_ejection_is_recorded_and_an_ejected_member_is_skipped_as_if_down() -> None:
    fg = _grid("abz", eject_after_failures=2)
    ov = _overlay((NEW, "ab"), (NEW, "z"))
    for _ in range(2):  # a fails twice in a row: ejected
        _run(fg, ov, [Failure.CONNECT_FAILED, Answered(200)])
    steps = _run(fg, ov, [Answered(200)])
    assert _tried(steps) == [("b", "first")]  # a is skipped, still the first viable group
    for _ in range(2):  # b too: group 0 is ejected whole, group 1 takes it as `first`
        _run(fg, ov, [Failure.CONNECT_FAILED, Answered(200)])
    steps = _run(fg, ov, [Answered(200)])
    assert _tried(steps) == [("z", "first")]


def test_when_only_ejected_members_are_left_they_are_the_last_resort() -> None:
    fg = _grid("a", eject_after_failures=1)
    ov = _overlay((NEW, "a"))
    _run(fg, ov, [Failure.CONNECT_FAILED])
    (step,) = [s for s in _run(fg, ov, [Answered(200)]) if isinstance(s, Attempt)]
    assert step.view.site == "a" and step.decision.path is Path.LAST_RESORT


feed_st = st.one_of(
    st.sampled_from(list(Failure)),
    st.builds(Answered, st.sampled_from([200, 400, 429, 500, 502, 503, 504])),
)


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    drained=st.lists(st.booleans(), min_size=3, max_size=3),
    picker=st.sampled_from(list(Picker)),
    max_attempts=st.integers(1, 5),
    script=st.lists(feed_st, max_size=10),
    seed=st.integers(0, 2**16),
)
def test_every_overlay_request_terminates_once_within_max_attempts(
    sizes: list[int],
    drained: list[bool],
    picker: Picker,
    max_attempts: int,
    script: list[Feed],
    seed: int,
) -> None:
    names = iter("abcdefghi")
    groups = [
        (DRAIN if drained[i] else NEW, "".join(next(names) for _ in range(n)))
        for i, n in enumerate(sizes)
    ]
    fg = _grid("".join(sites for _, sites in groups), eject_after_failures=1)
    fg.rng = Random(seed)
    ov = _overlay(*groups, picker=picker, max_attempts=max_attempts)
    flow = request_flow(fg, MODEL, Policy.GRIDROUTE, overlay=ov)
    step = next(flow)
    seen: list[str] = []
    feeds = iter(script)
    while not step.terminal:
        assert isinstance(step, Attempt)
        assert step.view.key not in seen, "never the same candidate twice"
        assert step.number == len(seen) + 1 <= max_attempts
        seen.append(step.view.key)
        step = flow.send(next(feeds, Answered(200)))
    assert isinstance(step, Relay | Refuse | GiveUp)
    assert bool(seen) == (not isinstance(step, Refuse))
    with pytest.raises(StopIteration):
        flow.send(Answered(200))


def test_decisions_are_made_once_per_snapshot_and_never_outlive_it() -> None:
    g = Grid([Site("a"), Site("b")])
    fg = FakeGrid(g.refresh(1.0), g.own)
    ov = _overlay((NEW, "ab"))
    first = _run(fg, ov, [Answered(200)])[0]
    again = _run(fg, ov, [Answered(200)])[0]
    assert isinstance(first, Attempt) and isinstance(again, Attempt)
    assert again.decision is first.decision  # the same snapshot: built once
    fg.snapshot = newer = g.refresh(2.0)
    later = _run(fg, ov, [Answered(200)])[0]
    assert isinstance(later, Attempt) and later.snapshot is newer
    assert later.decision is not first.decision and later.view is newer.view("a/p")
