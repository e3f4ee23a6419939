"""The overlay request sequence (core/group_route.py): binding, best viable group, picker,
retry in the group, fall-through, admission states."""

from __future__ import annotations

from collections import Counter
from random import Random

from gridroute.core.group_route import (
    Affinity,
    Group,
    ModelGroups,
    OverlayIndex,
    RouteTable,
    Slot,
    Step,
    build_table,
    route,
)
from gridroute.core.groups import Admission
from gridroute.core.pickers import Picker, PickerStates

from .grid_builder import MODEL, Grid, Site

NEW = Admission.NEW_AND_EXISTING
DRAIN = Admission.EXISTING_ONLY


def _index(
    *groups: tuple[Admission, list[str]],
    picker: Picker = Picker.ROUND_ROBIN,
    excluded: tuple[str, ...] = (),
    weights: dict[str, int] | None = None,
    revision: int = 1,
) -> OverlayIndex:
    w = weights or {}
    gs = tuple(
        Group(i, adm, tuple(Slot(s, "p", w.get(s)) for s in sites))
        for i, (adm, sites) in enumerate(groups)
    )
    mg = ModelGroups(MODEL, picker, gs, tuple(Slot(s, "p") for s in excluded))
    return OverlayIndex(revision, f"d{revision}", {MODEL: mg})


def _keys(table: RouteTable, states: PickerStates, n: int, **kw: object) -> list[str]:
    out = []
    for _ in range(n):
        d = route(table, MODEL, states, Random(0), **kw)  # type: ignore[arg-type]
        assert d is not None and d.slot is not None
        out.append(d.slot.site)
    return out


def test_round_robin_over_group_zero_only_while_it_is_viable() -> None:
    t = build_table(_index((NEW, ["a", "b", "c"]), (NEW, ["z"])))
    assert _keys(t, PickerStates(), 6) == ["a", "b", "c", "a", "b", "c"]


def test_a_model_the_overlay_does_not_name_is_left_to_the_config() -> None:
    t = build_table(_index((NEW, ["a"])))
    assert route(t, "other", PickerStates(), Random(0)) is None


def test_only_excluded_or_draining_means_no_site_not_unknown() -> None:
    t = build_table(_index((DRAIN, ["a"]), excluded=("x",)))
    d = route(t, MODEL, PickerStates(), Random(0))
    assert d is not None and d.slot is None and d.step is Step.NONE


def test_existing_only_serves_bound_sessions_and_no_new_ones() -> None:
    t = build_table(_index((DRAIN, ["a"]), (NEW, ["b"])))
    bound = route(t, MODEL, PickerStates(), Random(0), session=True, bound="a/p")
    assert bound is not None and bound.slot is not None
    assert (bound.slot.site, bound.affinity, bound.step) == ("a", Affinity.REUSED, Step.BOUND)
    new = route(t, MODEL, PickerStates(), Random(0), session=True)
    assert new is not None and new.slot is not None
    assert (new.slot.site, new.group, new.affinity) == ("b", 1, Affinity.CREATED)


def test_excluded_never_serves_even_a_bound_session() -> None:
    t = build_table(_index((NEW, ["b"]), excluded=("a",)))
    d = route(t, MODEL, PickerStates(), Random(0), session=True, bound="a/p")
    assert d is not None and d.slot is not None
    assert (d.slot.site, d.affinity) == ("b", Affinity.FAILED_OVER)


def test_a_binding_to_a_down_provider_fails_over() -> None:
    t = build_table(_index((NEW, ["a", "b"])), down=["a/p"])
    d = route(t, MODEL, PickerStates(), Random(0), session=True, bound="a/p")
    assert d is not None and d.slot is not None
    assert (d.slot.site, d.affinity, d.step) == ("b", Affinity.FAILED_OVER, Step.FIRST)


def test_retry_stays_in_the_group_in_group_order_then_falls_through() -> None:
    t = build_table(_index((NEW, ["a", "b", "c"]), (NEW, ["y", "z"])))
    states = PickerStates()
    first = route(t, MODEL, states, Random(0))
    assert first is not None and first.slot is not None and first.slot.site == "a"
    tried: frozenset[str] = frozenset()
    seen = [("a", first.step)]
    last = first.slot.key
    for _ in range(3):
        tried = tried | {last}
        d = route(t, MODEL, states, Random(0), tried=tried, last=last)
        assert d is not None and d.slot is not None
        seen.append((d.slot.site, d.step))
        last = d.slot.key
    assert seen == [
        ("a", Step.FIRST),
        ("b", Step.IN_GROUP),
        ("c", Step.IN_GROUP),
        ("y", Step.FELL_THROUGH),
    ]


def test_retry_order_starts_after_the_failed_member_and_wraps() -> None:
    t = build_table(_index((NEW, ["a", "b", "c"])))
    d = route(t, MODEL, PickerStates(), Random(0), tried=frozenset({"c/p"}), last="c/p")
    assert d is not None and d.slot is not None and d.slot.site == "a"


def test_a_group_whose_members_are_down_is_skipped_and_recovery_returns_to_it() -> None:
    idx = _index((NEW, ["a", "b"]), (NEW, ["z"]))
    states = PickerStates()
    assert _keys(build_table(idx, down=["a/p", "b/p"]), states, 2) == ["z", "z"]
    assert _keys(build_table(idx), states, 2) == ["a", "b"]


def test_republishing_the_same_content_does_not_reset_round_robin() -> None:
    states = PickerStates()
    assert _keys(build_table(_index((NEW, ["a", "b", "c"]), revision=1)), states, 2) == ["a", "b"]
    again = build_table(_index((NEW, ["a", "b", "c"]), revision=2))
    assert _keys(again, states, 2) == ["c", "a"]


def test_removal_and_recovery_of_one_provider_leaves_other_state_alone() -> None:
    states = PickerStates()
    two = _index((NEW, ["a", "b"]), picker=Picker.ROUND_ROBIN)
    other = ModelGroups("n", Picker.ROUND_ROBIN, (Group(0, NEW, (Slot("x", "p"), Slot("y", "p"))),))
    idx = OverlayIndex(1, "d", {MODEL: two.models[MODEL], "n": other})
    t = build_table(idx)
    assert route(t, "n", states, Random(0)).slot.site == "x"  # type: ignore[union-attr]
    _keys(build_table(idx, down=["a/p"]), states, 3)  # a leaves model m's group
    _keys(build_table(idx), states, 1)  # and comes back
    assert route(t, "n", states, Random(0)).slot.site == "y"  # type: ignore[union-attr]


def test_multiple_capabilities_route_independently() -> None:
    g0 = ModelGroups("m", Picker.DETERMINISTIC, (Group(0, NEW, (Slot("a", "p"), Slot("b", "p"))),))
    g1 = ModelGroups("n", Picker.ROUND_ROBIN, (Group(0, NEW, (Slot("b", "p"), Slot("c", "p"))),))
    t = build_table(OverlayIndex(1, "d", {"m": g0, "n": g1}))
    states = PickerStates()
    got = [(route(t, m, states, Random(0)).slot.site) for m in "mnmn"]  # type: ignore[union-attr]
    assert got == ["a", "b", "a", "c"]


def test_weighted_exact_split_and_bindings_hold_while_weights_change() -> None:
    states = PickerStates()
    t = build_table(_index((NEW, ["a", "b"]), picker=Picker.WEIGHTED, weights={"a": 3, "b": 1}))
    assert Counter(_keys(t, states, 400)) == {"a": 300, "b": 100}
    t2 = build_table(_index((NEW, ["a", "b"]), picker=Picker.WEIGHTED, weights={"a": 1, "b": 9}))
    d = route(t2, MODEL, states, Random(0), session=True, bound="b/p")
    assert (
        d is not None and d.slot is not None and (d.slot.site, d.affinity) == ("b", Affinity.REUSED)
    )
    assert Counter(_keys(t2, states, 100)) == {"a": 10, "b": 90}


def test_duplicate_entries_are_extra_slots() -> None:
    idx = OverlayIndex(
        1,
        "d",
        {
            MODEL: ModelGroups(
                MODEL,
                Picker.ROUND_ROBIN,
                (Group(0, NEW, (Slot("a", "p"), Slot("a", "p"), Slot("b", "p"))),),
            )
        },
    )
    assert Counter(_keys(build_table(idx), PickerStates(), 30)) == {"a": 20, "b": 10}


def test_legacy_ungrouped_is_ordered_first_viable() -> None:
    gs = tuple(
        Group(i, adm, (Slot(s, "p"),))
        for i, (adm, s) in enumerate([(DRAIN, "a"), (NEW, "b"), (NEW, "c")])
    )
    t = build_table(
        OverlayIndex(1, "d", {MODEL: ModelGroups(MODEL, Picker.DETERMINISTIC, gs, grouped=False)})
    )
    assert _keys(t, PickerStates(), 3) == ["b", "b", "b"]
    d = route(t, MODEL, PickerStates(), Random(0), tried=frozenset({"b/p"}), last="b/p")
    assert d is not None and d.slot is not None and d.slot.site == "c"


def test_saturation_picks_the_least_loaded_of_the_group_and_never_outside() -> None:
    grid = Grid([Site("a", running=90.0), Site("b", running=10.0), Site("z", running=0.0)])
    snap = grid.refresh(10.0)
    t = build_table(_index((NEW, ["a", "b"]), (NEW, ["z"]), picker=Picker.SATURATION))
    got = Counter(
        route(t, MODEL, PickerStates(), Random(i), snapshot=snap).slot.site  # type: ignore[union-attr]
        for i in range(300)
    )
    assert set(got) <= {"a", "b"} and got["b"] > got["a"]
    retry = route(
        t, MODEL, PickerStates(), Random(0), snapshot=snap, tried=frozenset({"b/p"}), last="b/p"
    )
    assert retry is not None and retry.slot is not None and retry.slot.site == "a"


def test_weighted_fall_through_into_a_partly_tried_group_stays_in_range() -> None:
    idx = _index((NEW, ["a"]), (NEW, ["b", "c"]), picker=Picker.WEIGHTED, weights={"b": 1, "c": 5})
    t = build_table(idx)
    for _ in range(8):
        d = route(t, MODEL, PickerStates(), Random(0), tried=frozenset({"a/p", "c/p"}), last="a/p")
        assert d is not None and d.slot is not None
        assert (d.slot.site, d.step) == ("b", Step.FELL_THROUGH)


def test_avoided_members_are_skipped_without_counting_as_tried() -> None:
    t = build_table(_index((NEW, ["a", "b"]), (NEW, ["z"]), picker=Picker.DETERMINISTIC))
    d = route(t, MODEL, PickerStates(), Random(0), avoid=frozenset({"a/p"}))
    assert d is not None and d.slot is not None
    assert (d.slot.site, d.group, d.step) == ("b", 0, Step.FIRST)
    d = route(t, MODEL, PickerStates(), Random(0), avoid=frozenset({"a/p", "b/p"}))
    assert d is not None and d.slot is not None
    assert (d.slot.site, d.group, d.step) == ("z", 1, Step.FIRST)  # group 0 not viable
    d = route(
        t, MODEL, PickerStates(), Random(0), session=True, bound="a/p", avoid=frozenset({"a/p"})
    )
    assert d is not None and d.slot is not None
    assert (d.slot.site, d.affinity) == ("b", Affinity.FAILED_OVER)
