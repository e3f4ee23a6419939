"""The four weight steps of core/trafficmap.py, one table per step (seed, "How OME sets
the weights"; reference 4.2/4.3)."""

from fractions import Fraction

import pytest

from gridroute.core.probegate import ProbeResult, ProbeState
from gridroute.core.trafficmap import (
    MAX_WEIGHT,
    AllFailedPolicy,
    CapacitySource,
    Drain,
    Home,
    MapInput,
    Mode,
    compute,
    lowest_counts,
    reduce_ratio,
)

GATED = ProbeState(ProbeResult.FAILING, True, 3, 0, 10.0, "503")
PASSING = ProbeState(ProbeResult.PASSING, False, 0, 1, 10.0, "200")


def home(cluster: str, allocated: int, ready: int, **kw: object) -> Home:
    return Home(cluster, f"http://{cluster}.example.com", allocated, ready, **kw)  # type: ignore[arg-type]


def weights(*homes: Home, **kw: object) -> dict[str, int]:
    table = compute(MapInput("svc", Mode.SPLIT, tuple(homes), **kw))  # type: ignore[arg-type]
    return {e.cluster: e.weight for e in table.entries}


def test_seed_example_four_and_two_become_two_and_one() -> None:
    assert weights(home("cluster-a", 4, 4), home("cluster-b", 2, 2)) == {
        "cluster-a": 2,
        "cluster-b": 1,
    }


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((6, 6), (0, 4), (1, 0)),  # reference: 6/6 and 0/4 -> 1 and 0
        ((4, 2), (2, 4), (1, 1)),  # step 1 takes the lower of allocated and ready
        ((3, 3), (3, 0), (1, 0)),  # not ready: 0
        ((0, 0), (0, 0), (0, 0)),
        ((5, 5), (3, 3), (5, 3)),  # already coprime
    ],
)
def test_step1_min_of_allocated_and_ready(a, b, expected) -> None:
    got = weights(home("a", *a), home("b", *b))
    assert (got["a"], got["b"]) == expected


def test_step1_capacity_factor_multiplies_and_stays_exact() -> None:
    got = weights(home("a", 2, 2, factor=Fraction(3, 2)), home("b", 2, 2))
    assert got == {"a": 3, "b": 2}
    got = weights(home("a", 3, 3, factor=Fraction(1, 10)), home("b", 1, 1, factor=Fraction(1, 5)))
    assert got == {"a": 3, "b": 2}


def test_step1_capacity_report_lowers_never_raises() -> None:
    table = compute(
        MapInput(
            "svc",
            Mode.SPLIT,
            (home("a", 4, 4, reported=1), home("b", 2, 2, reported=9)),
            capacity_polling=True,
        )
    )
    a, b = table.entries
    assert (a.allocated, a.source, a.weight) == (1, CapacitySource.ENDPOINT, 1)
    assert (b.allocated, b.source, b.reported, b.weight) == (2, CapacitySource.CONTROL_PLANE, 9, 2)


def test_engine_and_decoder_take_the_lower_counts() -> None:
    assert lowest_counts((4, 3), (2, 5)) == (2, 3)


def test_step2_gated_probe_zeroes_only_that_home() -> None:
    got = weights(home("a", 4, 4, probe=GATED), home("b", 2, 2, probe=PASSING))
    assert got == {"a": 0, "b": 1}


def test_step2_unknown_never_gates() -> None:
    unknown = ProbeState(ProbeResult.UNKNOWN, False, 0, 0, 10.0, "no route to prober")
    assert weights(home("a", 4, 4, probe=unknown), home("b", 2, 2, probe=unknown)) == {
        "a": 2,
        "b": 1,
    }


def test_step2_exception_all_probes_failed_preserve_traffic_keeps_capacity_weights() -> None:
    table = compute(
        MapInput("svc", Mode.SPLIT, (home("a", 4, 4, probe=GATED), home("b", 2, 2, probe=GATED)))
    )
    assert [e.weight for e in table.entries] == [2, 1]
    assert table.all_probes_failed and all(e.preserved for e in table.entries)
    assert not any(e.healthy for e in table.entries)


def test_step2_exception_all_probes_failed_drain_writes_all_zero() -> None:
    got = weights(
        home("a", 4, 4, probe=GATED),
        home("b", 2, 2, probe=GATED),
        all_failed_policy=AllFailedPolicy.DRAIN,
    )
    assert got == {"a": 0, "b": 0}


def test_step2_an_unprobed_home_is_not_a_failure_so_no_exception() -> None:
    got = weights(
        home("a", 4, 4, probe=GATED),
        home("c", 2, 2),  # no probe block (invalid endpoint): keeps its weight
        all_failed_policy=AllFailedPolicy.DRAIN,
    )
    assert got == {"a": 0, "c": 1}
    assert weights(home("a", 4, 4, probe=GATED), home("c", 2, 2)) == {"a": 0, "c": 1}


def test_step2_preserve_still_leaves_unready_homes_at_zero() -> None:
    got = weights(home("a", 4, 4, probe=GATED), home("b", 2, 0, probe=GATED))
    assert got == {"a": 1, "b": 0}


def test_step3_reduces_to_smallest_ratio() -> None:
    assert reduce_ratio([Fraction(8), Fraction(12), Fraction(0)]) == [2, 3, 0]
    assert reduce_ratio([Fraction(1, 2), Fraction(1, 3)]) == [3, 2]


def test_step3_caps_at_gateway_api_limit_without_zeroing_a_positive_weight() -> None:
    got = reduce_ratio([Fraction(3_000_001), Fraction(1)])
    assert max(got) <= MAX_WEIGHT and got[1] >= 1


def test_step4_drain_zeroes_the_entry_and_the_others_stay() -> None:
    homes = (home("a", 4, 4), home("b", 2, 2), home("c", 3, 3))
    before = weights(*homes)
    after = weights(*homes, drains=(Drain("maint-a", "a", "planned"),))
    assert before == {"a": 4, "b": 2, "c": 3}
    assert after == {"a": 0, "b": 2, "c": 3}


def test_step4_several_ids_may_hold_one_cluster() -> None:
    table = compute(
        MapInput(
            "svc",
            Mode.SPLIT,
            (home("a", 1, 1), home("b", 1, 1)),
            drains=(Drain("z", "a"), Drain("y", "a")),
        )
    )
    assert table.entries[0].drain_refs == ("y", "z")
    assert table.entries[0].healthy  # a drain does not change health evidence


def test_entries_are_sorted_by_cluster_and_homes_without_endpoint_left_out() -> None:
    table = compute(
        MapInput("svc", Mode.ALL, (home("z", 1, 1), home("m", 1, 1), Home("q", None, 1, 1)))
    )
    assert [e.cluster for e in table.entries] == ["m", "z"]
    assert table.placed
