"""Selection groups (reference-behaviour.md 2.1): sort orders, group boundaries, checks."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gridroute.core.groups import (
    Admission,
    Locality,
    Member,
    RoutingPolicy,
    assign_groups,
    check_groups,
)

NEW = Admission.NEW_AND_EXISTING
DRAIN = Admission.EXISTING_ONLY
GEO = RoutingPolicy.GEOGRAPHY_FIRST
SCORE = RoutingPolicy.SCORE_FIRST


def _layout(members: list[Member], policy: RoutingPolicy = GEO) -> list[tuple[str, int]]:
    return [(m.key, g) for m, g in assign_groups(members, policy).members]


def test_three_equal_providers_share_group_zero_in_site_order() -> None:
    ms = [Member("c", "p"), Member("a", "p"), Member("b", "p")]
    assert _layout(ms) == [("a/p", 0), ("b/p", 0), ("c/p", 0)]


def test_geography_first_splits_on_locality_and_orders_by_score_inside() -> None:
    ms = [
        Member("far", "p", locality=Locality.CROSS_REGION, score=9.0),
        Member("here2", "p", locality=Locality.SAME_SITE, score=1.0),
        Member("here1", "p", locality=Locality.SAME_SITE, score=2.0),
    ]
    assert _layout(ms, GEO) == [("here1/p", 0), ("here2/p", 0), ("far/p", 1)]


def test_score_first_ignores_locality_for_groups_and_sorts_by_score() -> None:
    ms = [
        Member("far", "p", locality=Locality.CROSS_REGION, score=9.0),
        Member("here", "p", locality=Locality.SAME_SITE, score=1.0),
    ]
    assert _layout(ms, SCORE) == [("far/p", 0), ("here/p", 0)]


def test_scores_never_split_a_group() -> None:
    # The reference (not the spike comment's exact-score rule): different scores, one group.
    ms = [Member("a", "p", score=0.1), Member("b", "p", score=0.9), Member("c", "p")]
    for policy in RoutingPolicy:
        assert {g for _, g in _layout(ms, policy)} == {0}
    assert [k for k, _ in _layout(ms)] == ["b/p", "a/p", "c/p"]  # unscored last


def test_admission_and_freshness_split_groups_in_both_policies() -> None:
    ms = [
        Member("drain", "p", admission=DRAIN),
        Member("stale", "p", fresh=False),
        Member("ok", "p"),
    ]
    for policy in RoutingPolicy:
        assert _layout(ms, policy) == [("ok/p", 0), ("stale/p", 1), ("drain/p", 2)]


def test_excluded_are_kept_aside_and_exact_duplicates_dropped() -> None:
    ms = [
        Member("a", "p"),
        Member("a", "p"),
        Member("x", "p", admission=Admission.EXCLUDED),
    ]
    g = assign_groups(ms)
    assert [(m.key, n) for m, n in g.members] == [("a/p", 0)]
    assert [m.key for m in g.excluded] == ["x/p"]


def test_tiebreakers_are_site_then_provider_then_cluster() -> None:
    ms = [Member("a", "q", "2"), Member("a", "q", "1"), Member("a", "p", "9"), Member("0", "z")]
    got = [(m.key, m.cluster) for m, _ in assign_groups(ms).members]
    assert got == [("0/z", ""), ("a/p", "9"), ("a/q", "1"), ("a/q", "2")]


_members = st.lists(
    st.builds(
        Member,
        site=st.sampled_from(["a", "b", "c", "d"]),
        provider=st.sampled_from(["p", "q"]),
        cluster=st.sampled_from(["", "k"]),
        admission=st.sampled_from(list(Admission)),
        locality=st.sampled_from(list(Locality)),
        fresh=st.booleans(),
        score=st.one_of(st.none(), st.sampled_from([0.0, 0.5, 1.0, 2.5])),
    ),
    max_size=12,
)


@given(_members, st.randoms(use_true_random=False), st.sampled_from(list(RoutingPolicy)))
def test_every_permutation_gives_the_same_groups(
    members: list[Member], rnd: object, policy: RoutingPolicy
) -> None:
    shuffled = list(members)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert assign_groups(members, policy) == assign_groups(shuffled, policy)


@given(_members, st.sampled_from(list(RoutingPolicy)))
def test_published_groups_pass_the_consumer_checks(
    members: list[Member], policy: RoutingPolicy
) -> None:
    g = assign_groups(members, policy)
    assert check_groups([(n, m.admission) for m, n in g.members]) == []
    assert all(m.admission is not Admission.EXCLUDED for m, _ in g.members)


def test_check_groups_messages_are_the_reference_ones() -> None:
    assert [p.message for p in check_groups([(0, NEW), (None, NEW)])] == [
        "capability mixes grouped and ungrouped candidates"
    ]
    assert check_groups([(1, NEW)])[0].message == "selection_group must start at 0"
    gap = check_groups([(0, NEW), (2, NEW)])[0]
    assert (gap.index, gap.group) == (1, 2)
    assert gap.message.startswith("selection_group must be contiguous and monotonic")
    back = check_groups([(0, NEW), (1, NEW), (0, NEW)])[0]
    assert back.message.startswith("selection_group must be contiguous and monotonic")
    mixed = check_groups([(0, NEW), (0, DRAIN)])[0]
    assert mixed.message.startswith("selection_group 0 mixes admission states")
    assert check_groups([(None, NEW), (None, DRAIN)]) == []  # legacy list: no rules
    assert check_groups([(0, NEW), (0, NEW), (1, DRAIN)]) == []


def test_conflicting_reports_of_one_provider_keep_the_least_eligible() -> None:
    ms = [Member("a", "p"), Member("a", "p", admission=DRAIN), Member("b", "p")]
    assert _layout(ms) == [("b/p", 0), ("a/p", 1)]
    gone = assign_groups([Member("a", "p"), Member("a", "p", admission=Admission.EXCLUDED)])
    assert gone.members == () and [m.key for m in gone.excluded] == ["a/p"]
