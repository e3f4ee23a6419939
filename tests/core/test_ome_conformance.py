"""OME TrafficMap conformance, core layer: the scenarios of OME's own Go tests
(ome-projects/ome, pkg/controller/v1beta1/placement/routing/*_test.go), re-stated against
gridroute's pure decisions (core.trafficmap, core.trafficmap_conditions, core.probegate,
core.capacityreport).

OME's `Home{Allocated, Ready, Factor, Reported, Reachable}` is gridroute's `Home`:
`Reachable` nil is "no probe block", true a passing probe, false a closed gate. OME's
`Weights`/`buildSpec` results are read off `compute()`'s entries by cluster (both sort by
cluster). Each test's docstring names the upstream file and test (and case).
"""

from __future__ import annotations

from fractions import Fraction

import pytest

from gridroute.core.capacityreport import Attempt, CapacityReport, ReportPolicy, read
from gridroute.core.probegate import ProbeResult, ProbeState, ProbeThresholds, step
from gridroute.core.quantity import parse_quantity
from gridroute.core.trafficmap import (
    MAX_WEIGHT,
    AllFailedPolicy,
    CapacitySource,
    Drain,
    Home,
    MapInput,
    Mode,
    Table,
    compute,
)
from gridroute.core.trafficmap_conditions import (
    Status,
    capacity_fallback,
    override_active,
    routable,
)
from gridroute.wire.trafficmap import map_entry

PRESERVE, DRAIN = AllFailedPolicy.PRESERVE_TRAFFIC, AllFailedPolicy.DRAIN
GATED = ProbeState(ProbeResult.FAILING, True, 3, 0, 1.0, "HTTP 503")
PASSING = ProbeState(ProbeResult.PASSING, False, 0, 2, 1.0, "HTTP 200")
WEIGHT_TEST = "routing/weight_test.go"
CONTROLLER_TEST = "routing/controller_test.go"
DRAIN_TEST = "routing/manual_drain_test.go"


def home(
    cluster: str,
    allocated: int,
    ready: int,
    *,
    factor: str | Fraction = "1",
    reachable: bool | None = None,
    reported: int | None = None,
    fallback: str | None = None,
    endpoint: str | None = "",
) -> Home:
    """OME's `Home` as gridroute's; `reachable` False is a closed probe gate."""
    probe = None if reachable is None else (PASSING if reachable else GATED)
    return Home(
        cluster,
        f"https://{cluster}.example" if endpoint == "" else endpoint,
        allocated,
        ready,
        factor if isinstance(factor, Fraction) else Fraction(factor),
        probe,
        reported,
        fallback,
    )


def table(
    *homes: Home,
    policy: AllFailedPolicy = PRESERVE,
    drains: tuple[Drain, ...] = (),
    polling: bool = False,
    mode: Mode = Mode.SPLIT,
) -> Table:
    return compute(MapInput("svc", mode, homes, drains, policy, polling))


def weights(homes: list[Home], policy: AllFailedPolicy = PRESERVE) -> list[int]:
    """OME's `weights(homes, policy)`: index-aligned with `homes`."""
    by_cluster = {e.cluster: e.weight for e in table(*homes, policy=policy).entries}
    return [by_cluster[h.cluster] for h in homes]


def reason(t: Table, policy: AllFailedPolicy = PRESERVE) -> tuple[Status, str]:
    cond = routable(t, policy)
    return cond.status, cond.reason


# --- weight_test.go ---------------------------------------------------------------------

NOT_POSITIVE = pytest.mark.xfail(
    strict=True,
    reason="deliberate: a factor <= 0 never reaches the weights in gridroute; "
    "docs/trafficmap.md: 'A bad edit (a factor <= 0, ...) refuses only that service' "
    "(OME's reconciler refuses it too: 'validate routing policy: ... must be positive'); "
    "only OME's pure Weights() treats it as 1",
)

TEST_WEIGHTS = [
    ("empty input yields empty output", [], []),
    ("single healthy home always weight 1", [home("a", 7, 3)], [1]),
    ("equal allocation and factor splits evenly", [home("a", 4, 4), home("b", 4, 4)], [1, 1]),
    ("proportional to allocation reduced by gcd", [home("a", 5, 5), home("b", 2, 2)], [5, 2]),
    ("partial readiness lowers each home's share", [home("a", 7, 4), home("b", 3, 3)], [4, 3]),
    (
        "heterogeneous hardware weighted by capacity factor",
        [home("fast", 100, 100, factor="2"), home("slow", 100, 100, factor="1")],
        [2, 1],
    ),
    (
        "fractional factor kept exact via milli scale",
        [home("fast", 100, 100, factor="1"), home("slow", 100, 100, factor="0.5")],
        [2, 1],
    ),
    (
        "unhealthy home is gated to zero, others keep ratio",
        [home("a", 6, 6), home("b", 4, 0), home("c", 2, 2)],
        [3, 0, 1],
    ),
    ("all homes unready stay at zero", [home("a", 5, 0), home("b", 3, 0)], [0, 0]),
    ("nothing allocated stays at zero", [home("a", 0, 4), home("b", 0, 4)], [0, 0]),
    ("nil factor treated as identity", [home("a", 3, 3), home("b", 1, 1, factor="1")], [3, 1]),
    pytest.param(
        [home("a", 2, 2, factor="0"), home("b", 2, 2, factor="-3")],
        [1, 1],
        marks=NOT_POSITIVE,
        id="non-positive factor treated as identity",
    ),
    (
        "heterogeneous with differing allocation and factor",
        [home("fast", 4, 4, factor="3"), home("slow", 6, 6, factor="1")],
        [2, 1],
    ),
    (
        "ratio at the publisher limit remains exact",
        [home("large", 1, 1, factor="1000000"), home("baseline", 1, 1)],
        [MAX_WEIGHT, 1],
    ),
    (
        "ratio one above the publisher limit is proportionally bounded",
        [home("large", 1, 1, factor="1000001"), home("baseline", 1, 1)],
        [MAX_WEIGHT, 1],
    ),
    (
        "ratio beyond the publisher limit is safely compressed",
        [
            home("large", 1, 1, factor="3000000000"),
            home("gated", 1, 0, factor="9000000000"),
            home("baseline", 1, 1),
        ],
        [MAX_WEIGHT, 0, 1],
    ),
    (
        "factor and allocation multiplication cannot overflow",
        [
            home("large", 2**31 - 1, 2**31 - 1, factor="9223372036854775807"),
            home("baseline", 1, 1),
        ],
        [MAX_WEIGHT, 1],
    ),
]


@pytest.mark.parametrize(
    ("homes", "want"),
    [pytest.param(c[1], c[2], id=c[0]) if type(c) is tuple else c for c in TEST_WEIGHTS],
)
def test_weights(homes: list[Home], want: list[int]) -> None:
    """weight_test.go::TestWeights (every case; the case name is the test id)."""
    assert weights(homes) == want


@pytest.mark.parametrize(
    ("homes", "want"),
    [
        pytest.param(
            [home("a", 7, 7, reported=100), home("b", 3, 3)],
            [7, 3],
            id="report above plan does not raise the share",
        ),
        pytest.param(
            [home("a", 8, 8, reported=2), home("b", 2, 2)],
            [1, 1],
            id="report below plan lowers the share",
        ),
        pytest.param(
            [home("a", 7, 7, reported=7), home("b", 3, 3)],
            [7, 3],
            id="report equal to plan is a no-op",
        ),
        pytest.param(
            [home("a", 7, 7, reported=0), home("b", 3, 3)],
            [0, 1],
            id="report of zero drops the home to weight 0",
        ),
        pytest.param(
            [home("a", 7, 7, reported=-1), home("b", 3, 3)],
            [7, 3],
            id="negative report falls back to the plan",
        ),
        pytest.param(
            [home("a", 7, 7, reported=0), home("b", 3, 3, reported=0)],
            [0, 0],
            id="every home reporting zero stays at zero",
        ),
        pytest.param(
            [home("a", 8, 8, reported=2, factor="2"), home("b", 4, 4)],
            [1, 1],
            id="ceiling composes with the capacity factor",
        ),
    ],
)
def test_weights_reported_capacity_is_a_ceiling(homes: list[Home], want: list[int]) -> None:
    """weight_test.go::TestWeights_ReportedCapacityIsACeiling (every case)."""
    assert weights(homes) == want


@pytest.mark.parametrize(
    ("homes", "want"),
    [
        pytest.param(
            [home("a", 7, 7), home("b", 3, 3)],
            [7, 3],
            id="nil reachable does not gate (probing off, or no verdict yet)",
        ),
        pytest.param(
            [home("a", 7, 7, reachable=True), home("b", 3, 3, reachable=True)],
            [7, 3],
            id="reachable true is a no-op",
        ),
        pytest.param(
            [home("a", 7, 7, reachable=False), home("b", 3, 3, reachable=True)],
            [0, 1],
            id="unreachable home is gated despite being ready",
        ),
        pytest.param(
            [home("a", 7, 7, reachable=False), home("b", 3, 3, reachable=False)],
            [7, 3],
            id="every home unreachable preserves capacity weights",
        ),
        pytest.param(
            [home("a", 7, 0, reachable=True), home("b", 3, 3, reachable=True)],
            [0, 1],
            id="reachable but unready is still gated",
        ),
        pytest.param(
            [home("a", 8, 8, reported=4), home("b", 4, 4, reachable=False), home("c", 4, 4)],
            [1, 0, 1],
            id="probe gate composes with the reported ceiling",
        ),
    ],
)
def test_weights_probe_gates_only_when_it_reached_a_verdict(
    homes: list[Home], want: list[int]
) -> None:
    """weight_test.go::TestWeights_ProbeGatesOnlyWhenItReachedAVerdict (every case)."""
    assert weights(homes) == want


def test_weights_drain_on_all_probe_failures() -> None:
    """weight_test.go::TestWeights_DrainOnAllProbeFailures: every home's probe failed;
    Drain writes 0:0, PreserveTraffic keeps 7:3. (OME's empty policy string, which also
    drains, has no gridroute counterpart: the policy is an enum defaulting to
    PreserveTraffic.)"""
    homes = [home("a", 7, 7, reachable=False), home("b", 3, 3, reachable=False)]
    assert weights(homes, DRAIN) == [0, 0]
    assert weights(homes, PRESERVE) == [7, 3]


@pytest.mark.parametrize(
    ("homes", "want"),
    [
        pytest.param(
            [
                home("a", 8, 6, reported=4, factor="2", reachable=False),
                home("b", 6, 3, reachable=False),
            ],
            [8, 3],
            id="capacity minima and factors still apply",
        ),
        pytest.param(
            [home("a", 7, 0, reachable=False), home("b", 3, 3, reachable=False)],
            [0, 1],
            id="unready home stays at zero",
        ),
        pytest.param(
            [home("a", 0, 7, reachable=False), home("b", 3, 3, reachable=False)],
            [0, 1],
            id="unadmitted home stays at zero",
        ),
        pytest.param(
            [home("a", 7, 7, reported=0, reachable=False), home("b", 3, 3, reachable=False)],
            [0, 1],
            id="zero reported capacity stays at zero",
        ),
        pytest.param(
            [home("a", 7, 0, reachable=False), home("b", 3, 0, reachable=False)],
            [0, 0],
            id="all unready stays all zero",
        ),
        pytest.param(
            [
                home("a", 7, 7, reported=0, reachable=False),
                home("b", 3, 3, reported=0, reachable=False),
            ],
            [0, 0],
            id="all reported capacity zero stays all zero",
        ),
        pytest.param(
            [home("a", 7, 7, reachable=False), home("b", 3, 0)],
            [0, 0],
            id="unknown verdict prevents fallback",
        ),
        pytest.param(
            [home("a", 7, 7, reachable=False), home("b", 0, 3, reachable=True)],
            [0, 0],
            id="passing verdict prevents fallback",
        ),
    ],
)
def test_weights_preserve_traffic_only_ignores_fleet_wide_probe_failure(
    homes: list[Home], want: list[int]
) -> None:
    """weight_test.go::TestWeights_PreserveTrafficOnlyIgnoresFleetWideProbeFailure."""
    assert weights(homes, PRESERVE) == want


@pytest.mark.parametrize(
    ("h", "want"),
    [
        pytest.param(home("x", 3, 7, reported=5), 3, id="admitted capacity is the minimum"),
        pytest.param(home("x", 7, 3, reported=5), 3, id="ready capacity is the minimum"),
        pytest.param(home("x", 7, 5, reported=2), 2, id="reported capacity is the minimum"),
        pytest.param(home("x", 7, 3), 3, id="absent report leaves admitted and ready minimum"),
        pytest.param(home("x", 0, 3), 0, id="zero admitted capacity stays zero"),
        pytest.param(home("x", 7, 0), 0, id="zero ready capacity stays zero"),
        pytest.param(home("x", 7, 5, reported=0), 0, id="zero reported capacity stays zero"),
        pytest.param(home("x", 7, -1), 0, id="negative ready capacity stays zero"),
        pytest.param(home("x", 7, 5, reported=-1), 5, id="negative report is ignored"),
    ],
)
def test_routable_replicas(h: Home, want: int) -> None:
    """weight_test.go::TestRoutableReplicas: min(effective allocated, ready), never
    negative; gridroute's is `Entry.servable` (factor 1 here)."""
    (entry,) = table(h).entries
    assert entry.servable == want


@pytest.mark.parametrize(
    ("h", "want", "source"),
    [
        pytest.param(
            home("x", 7, 7), 7, CapacitySource.CONTROL_PLANE, id="no report keeps the plan"
        ),
        pytest.param(
            home("x", 7, 7, reported=3), 3, CapacitySource.ENDPOINT, id="report below plan wins"
        ),
        pytest.param(
            home("x", 7, 7, reported=9),
            7,
            CapacitySource.CONTROL_PLANE,
            id="report above plan is capped at the plan",
        ),
        pytest.param(
            home("x", 7, 7, reported=0), 0, CapacitySource.ENDPOINT, id="report of zero is honored"
        ),
        pytest.param(
            home("x", 7, 7, reported=-5),
            7,
            CapacitySource.CONTROL_PLANE,
            id="negative report fails open to the plan",
        ),
    ],
)
def test_effective_allocated(h: Home, want: int, source: CapacitySource) -> None:
    """weight_test.go::TestEffectiveAllocated: the entry's recorded allocation is the one
    the weight used (and its source, as capacity_test.go::TestAllocationSource)."""
    (entry,) = table(h).entries
    assert (entry.allocated, entry.source) == (want, source)


@pytest.mark.parametrize(
    ("h", "source"),
    [
        pytest.param(
            home("x", 7, 7), CapacitySource.CONTROL_PLANE, id="no report is control plane"
        ),
        pytest.param(
            home("x", 7, 7, reported=9),
            CapacitySource.CONTROL_PLANE,
            id="report above plan is control plane",
        ),
        pytest.param(
            home("x", 2, 2, reported=2),
            CapacitySource.CONTROL_PLANE,
            id="report equal to plan is control plane",
        ),
        pytest.param(
            home("x", 7, 7, reported=2), CapacitySource.ENDPOINT, id="report below plan is endpoint"
        ),
    ],
)
def test_allocation_source(h: Home, source: CapacitySource) -> None:
    """capacity_test.go::TestAllocationSource (every case)."""
    (entry,) = table(h).entries
    assert entry.source is source


# --- controller_test.go: buildSpec and the reconciled table ----------------------------


def test_reconcile_split_generates_weighted_traffic_map() -> None:
    """controller_test.go::TestReconcile_SplitGeneratesWeightedTrafficMap: homes given
    b(2/2), a(5/5) come out cluster-sorted a=5, b=2, healthy, counts recorded."""
    t = table(home("b", 2, 2), home("a", 5, 5))
    a, b = t.entries
    assert (a.cluster, a.weight, a.healthy, a.allocated, a.ready) == ("a", 5, True, 5, 5)
    assert a.endpoint == "https://a.example"
    assert (b.cluster, b.weight) == ("b", 2)


def test_reconcile_unhealthy_home_gated_to_zero() -> None:
    """controller_test.go::TestReconcile_UnhealthyHomeGatedToZero: 6/6 and 4/0 -> 1 and 0."""
    a, b = table(home("a", 6, 6), home("b", 4, 0)).entries
    assert (a.weight, a.healthy, b.weight, b.healthy) == (1, True, 0, False)


def test_reconcile_all_mode_weights_follow_ready_replicas() -> None:
    """controller_test.go::TestReconcile_AllModeWeightsFollowReadyReplicas: 9/9, 1/1 -> 9:1."""
    a, b = table(home("a", 9, 9), home("b", 1, 1), mode=Mode.ALL).entries
    assert (a.weight, b.weight, a.allocated, b.allocated) == (9, 1, 9, 1)


def test_reconcile_single_mode_uses_ready_replicas_and_readiness_gate() -> None:
    """controller_test.go::TestReconcile_SingleModeUsesReadyReplicasAndReadinessGate."""
    (a,) = table(home("a", 9, 9), mode=Mode.SINGLE).entries
    assert (a.weight, a.allocated, a.healthy) == (1, 9, True)
    (a,) = table(home("a", 9, 0), mode=Mode.SINGLE).entries
    assert not a.healthy


def test_reconcile_split_weights_follow_ready_replicas() -> None:
    """controller_test.go::TestReconcile_SplitWeightsFollowReadyReplicas: 9/4, 9/2 -> 2:1."""
    a, b = table(home("a", 9, 4), home("b", 9, 2)).entries
    assert (a.weight, b.weight, a.allocated, b.allocated) == (2, 1, 9, 9)


def test_reconcile_not_placed_keeps_empty_traffic_map() -> None:
    """controller_test.go::TestReconcile_NotPlacedKeepsEmptyTrafficMap: no home at all is
    an empty table with Routable False / NotPlaced (gridroute has no placement phase: a
    service with no admitted home is the not-placed one)."""
    t = table()
    assert t.entries == ()
    assert reason(t) == (Status.FALSE, "NotPlaced")


def test_reconcile_no_addressable_home_keeps_empty_traffic_map() -> None:
    """controller_test.go::TestReconcile_NoAddressableHomeKeepsEmptyTrafficMap."""
    t = table(home("a", 3, 3, endpoint=None))
    assert t.entries == ()
    assert reason(t) == (Status.FALSE, "NoAddressableHome")


def test_reconcile_all_homes_unready_is_unroutable() -> None:
    """controller_test.go::TestReconcile_AllHomesUnreadyIsUnroutable: 3/0 and 3/0 -> both
    0, unhealthy, Routable False / AllHomesUnready."""
    t = table(home("a", 3, 0), home("b", 3, 0))
    assert [(e.weight, e.healthy) for e in t.entries] == [(0, False), (0, False)]
    assert reason(t) == (Status.FALSE, "AllHomesUnready")


def test_reconcile_invalid_probe_endpoint_does_not_block_valid_target() -> None:
    """controller_test.go::TestReconcile_InvalidProbeEndpointDoesNotBlockValidTarget: the
    home whose endpoint cannot be probed has no probe block and keeps a positive weight;
    the probed one passes; Routable True. (The HTTP side: the control conformance file.)"""
    invalid, valid = table(home("invalid", 3, 3), home("valid", 3, 3, reachable=True)).entries
    assert (invalid.probe, invalid.healthy, invalid.weight > 0) == (None, True, True)
    assert valid.probe is not None and valid.probe.result is ProbeResult.PASSING
    assert (valid.probe.gated, valid.healthy, valid.weight > 0) == (False, True, True)
    assert reason(table(home("invalid", 3, 3), home("valid", 3, 3, reachable=True)))[0] is (
        Status.TRUE
    )


def test_reconcile_inline_capacity_policy_drives_observation() -> None:
    """controller_test.go::TestReconcile_InlineCapacityPolicyDrivesObservationAndRequeue
    (the table part): a usable report of 1 on a 3/3 home -> allocated 1, reported 1,
    source Endpoint, no fallbackReason, CapacityFallback False / EndpointCapacityAvailable."""
    t = table(home("a", 3, 3, reported=1), polling=True)
    (a,) = t.entries
    assert (a.allocated, a.reported, a.source, a.fallback_reason) == (
        1,
        1,
        CapacitySource.ENDPOINT,
        None,
    )
    cond = capacity_fallback(t, True)
    assert (cond.status, cond.reason) == (Status.FALSE, "EndpointCapacityAvailable")


def _reading_at(age_s: float, max_age_s: float, servable: int) -> tuple[int | None, str | None]:
    now = 1_000.0
    r = read((Attempt(CapacityReport(servable, now - age_s)),), now, ReportPolicy(max_age_s, 1))
    return r.reported, r.fallback_reason


def test_reconcile_capacity_expiry_reprojects_without_polling_early() -> None:
    """controller_test.go::TestReconcile_CapacityExpiryReprojectsWithoutPollingEarly: a
    report observed 25 s ago with maxAge 30 s is used; 5 s later (no new poll) it has
    aged out: allocated back to the plan 3, ControlPlane, fallbackReason contains
    "stale", CapacityFallback True / EndpointCapacityUnavailable."""
    reported, why = _reading_at(25, 30, 1)
    assert (reported, why) == (1, None)
    reported, why = _reading_at(30, 30, 1)
    t = table(home("a", 3, 3, reported=reported, fallback=why), polling=True)
    (a,) = t.entries
    assert (a.allocated, a.reported, a.source) == (3, None, CapacitySource.CONTROL_PLANE)
    assert a.fallback_reason is not None and "stale" in a.fallback_reason
    cond = capacity_fallback(t, True)
    assert (cond.status, cond.reason) == (Status.TRUE, "EndpointCapacityUnavailable")


def test_build_spec_expires_capacity_before_projection() -> None:
    """controller_test.go::TestBuildSpec_ExpiresCapacityBeforeProjection: maxAge 10 s, a
    report of 2 observed maxAge-1s ago lowers 7 to 2 (Endpoint); one second later (age =
    maxAge) it is stale and the plan's 7 stands (ControlPlane, "stale")."""
    reported, why = _reading_at(9, 10, 2)
    (a,) = table(home("a", 7, 7, reported=reported, fallback=why), polling=True).entries
    assert (a.allocated, a.source, a.fallback_reason) == (2, CapacitySource.ENDPOINT, None)
    reported, why = _reading_at(10, 10, 2)
    (a,) = table(home("a", 7, 7, reported=reported, fallback=why), polling=True).entries
    assert (a.allocated, a.source, a.reported) == (7, CapacitySource.CONTROL_PLANE, None)
    assert why is not None and "stale" in why


def test_reconcile_invalid_capacity_endpoint_does_not_block_valid_target() -> None:
    """controller_test.go::TestReconcile_InvalidCapacityEndpointDoesNotBlockValidTarget:
    one home without a usable report records why, the other's report of 1 applies."""
    invalid, valid = table(
        home("invalid", 3, 3, fallback="unreachable: invalid endpoint"),
        home("valid", 3, 3, reported=1),
        polling=True,
    ).entries
    assert (invalid.reported, bool(invalid.fallback_reason)) == (None, True)
    assert valid.reported == 1


def test_reconcile_inline_capacity_disable_skips_global_capacity() -> None:
    """controller_test.go::TestReconcile_InlineCapacityDisableSkipsGlobalCapacity (the
    table part): polling off -> plan 3 stands, ControlPlane, no report, no fallbackReason,
    CapacityFallback False / CapacityPollingDisabled. (Per-service inline capacity blocks:
    the control conformance file.)"""
    t = table(home("a", 3, 3), polling=False)
    (a,) = t.entries
    assert (a.allocated, a.source, a.reported, a.fallback_reason) == (
        3,
        CapacitySource.CONTROL_PLANE,
        None,
        None,
    )
    cond = capacity_fallback(t, False)
    assert (cond.status, cond.reason) == (Status.FALSE, "CapacityPollingDisabled")


def test_build_spec_no_routable_capacity_is_reported_precisely() -> None:
    """controller_test.go::TestBuildSpec_NoRoutableCapacityIsReportedPrecisely: both homes
    report 0 -> weights 0, still healthy, Routable False / NoRoutableCapacity."""
    t = table(home("a", 7, 7, reported=0), home("b", 3, 3, reported=0), polling=True)
    assert [(e.weight, e.healthy) for e in t.entries] == [(0, True), (0, True)]
    assert reason(t) == (Status.FALSE, "NoRoutableCapacity")


def test_build_spec_records_capacity_fallback_reason() -> None:
    """controller_test.go::TestBuildSpec_RecordsCapacityFallbackReason: a poll that timed
    out leaves allocated 7 (ControlPlane), records the reason, and Routable stays True."""
    t = table(home("a", 7, 7, fallback="capacity request timed out"), polling=True)
    (a,) = t.entries
    assert (a.allocated, a.source, a.fallback_reason) == (
        7,
        CapacitySource.CONTROL_PLANE,
        "capacity request timed out",
    )
    assert reason(t) == (Status.TRUE, "Routable")


@pytest.mark.parametrize("policy", [PRESERVE, DRAIN], ids=["PreserveTraffic", "Drain"])
def test_build_spec_probe_failure_cannot_mask_zero_capacity(policy: AllFailedPolicy) -> None:
    """controller_test.go::TestBuildSpec_ProbeFailureCannotMaskZeroCapacity (both
    policies): every home reports 0 and every probe failed -> 0:0, NoRoutableCapacity."""
    t = table(
        home("a", 7, 7, reported=0, reachable=False),
        home("b", 3, 3, reported=0, reachable=False),
        policy=policy,
        polling=True,
    )
    assert [e.weight for e in t.entries] == [0, 0]
    assert reason(t, policy) == (Status.FALSE, "NoRoutableCapacity")


def test_build_spec_preserve_traffic_keeps_ready_capacity_on_fleet_wide_probe_failure() -> None:
    """controller_test.go::TestBuildSpec_PreserveTrafficKeepsReadyCapacityOnFleetWideProbe
    Failure: 7:3 kept, both unhealthy, Routable True / AllHomesProbeFailed."""
    t = table(home("a", 7, 7, reachable=False), home("b", 3, 3, reachable=False))
    assert [(e.weight, e.healthy) for e in t.entries] == [(7, False), (3, False)]
    assert reason(t) == (Status.TRUE, "AllHomesProbeFailed")


def test_build_spec_all_probe_failures_can_drain_every_home() -> None:
    """controller_test.go::TestBuildSpec_AllProbeFailuresCanDrainEveryHome."""
    t = table(home("a", 7, 7, reachable=False), home("b", 3, 3, reachable=False), policy=DRAIN)
    assert [e.weight for e in t.entries] == [0, 0]
    assert reason(t, DRAIN) == (Status.FALSE, "AllHomesProbeFailed")


def test_build_spec_preserve_traffic_requires_every_probe_to_fail() -> None:
    """controller_test.go::TestBuildSpec_PreserveTrafficRequiresEveryProbeToFail: a (7/7)
    probe-gated, b (3 admitted, 0 ready) never probed -> no fallback, 0:0, and since a
    home has ready replicas the reason is NoRoutableCapacity (not AllHomesUnready)."""
    t = table(home("a", 7, 7, reachable=False), home("b", 3, 0))
    assert [e.weight for e in t.entries] == [0, 0]
    assert reason(t) == (Status.FALSE, "NoRoutableCapacity")


def test_reconcile_serving_home_reports_routable() -> None:
    """controller_test.go::TestReconcile_ServingHomeReportsRoutable."""
    assert reason(table(home("a", 3, 3))) == (Status.TRUE, "Routable")


def test_reconcile_updates_existing_traffic_map_on_ready_replica_change() -> None:
    """controller_test.go::TestReconcile_UpdatesExistingTrafficMapOnReadyReplicaChange:
    5/5 and 5/5 -> 1:1; then 8/8 and 2/2 -> 4:1."""
    assert weights([home("a", 5, 5), home("b", 5, 5)]) == [1, 1]
    assert weights([home("a", 8, 8), home("b", 2, 2)]) == [4, 1]


@pytest.mark.parametrize(
    "upstream",
    ["TestReconcile_CapacityFactorWeightsHomes", "TestReconcile_RoutingCapacityFactorWeightsHomes"],
)
def test_reconcile_capacity_factor_weights_homes(upstream: str) -> None:
    """controller_test.go::TestReconcile_CapacityFactorWeightsHomes and
    ::TestReconcile_RoutingCapacityFactorWeightsHomes: factor 2 on a of two 5/5 homes ->
    2:1; the factor is recorded as provenance ("2"), b's is absent (identity)."""
    a, b = table(home("a", 5, 5, factor=parse_quantity("2")), home("b", 5, 5)).entries
    assert (a.weight, b.weight) == (2, 1)
    wire_a, wire_b = map_entry(a), map_entry(b)
    assert wire_a.capacity is not None and wire_a.capacity.factor == "2"
    assert wire_b.capacity is not None and wire_b.capacity.factor is None


def test_reconcile_fractional_capacity_factor() -> None:
    """controller_test.go::TestReconcile_FractionalCapacityFactor: "500m" on a of two 4/4
    homes -> 2:4 -> 1:2."""
    a, b = table(home("a", 4, 4, factor=parse_quantity("500m")), home("b", 4, 4)).entries
    assert (a.weight, b.weight) == (1, 2)


def test_build_spec_capacity_state_is_isolated_by_policy() -> None:
    """controller_test.go::TestBuildSpec_CapacityStateIsIsolatedByPolicy (the table part):
    with no report under the current policy the plan 7 stands with fallbackReason "no
    capacity report yet" and Routable True. (That a policy change discards the old
    policy's samples is internal state of the control plane; not checked here.)"""
    r = read((), 0.0, ReportPolicy(10, 1))
    assert (r.reported, r.fallback_reason) == (None, "no capacity report yet")
    t = table(home("a", 7, 7, fallback=r.fallback_reason), polling=True)
    (a,) = t.entries
    assert (a.allocated, a.reported, a.fallback_reason) == (7, None, "no capacity report yet")
    assert reason(t) == (Status.TRUE, "Routable")


# --- manual_drain_test.go ---------------------------------------------------------------


def test_reconcile_traffic_drain_annotation_composes_and_removal_restores_weight() -> None:
    """manual_drain_test.go::TestReconcile_TrafficDrainAnnotationComposesAndRemovalRestores
    ComputedWeight: two drains hold a (7/7): a 0 with drainRefs sorted, still healthy, b
    keeps 3; one drain left still holds a; capacity moving to 8:2 cannot raise a (b 1);
    removing the last drain restores a's computed 4 (4:1) and OverrideActive goes False /
    NoOverrides. (The message's "2 of 2": the next test.)"""
    both = (Drain("drain-b", "a", "second operator hold"), Drain("drain-a", "a", "first hold"))
    t = table(home("a", 7, 7), home("b", 3, 3), drains=both)
    a, b = t.entries
    assert (a.weight, a.healthy, a.drain_refs, b.weight) == (0, True, ("drain-a", "drain-b"), 3)
    cond = override_active(t, both)
    assert (cond.status, cond.reason) == (Status.TRUE, "OverridesApplied")

    one = (Drain("drain-b", "a", "second operator hold"),)
    a, _ = table(home("a", 7, 7), home("b", 3, 3), drains=one).entries
    assert (a.weight, a.drain_refs) == (0, ("drain-b",))
    assert weights_drained([home("a", 8, 8), home("b", 2, 2)], one) == [0, 1]

    t = table(home("a", 8, 8), home("b", 2, 2))
    a, b = t.entries
    assert (a.weight, a.drain_refs, b.weight) == (4, (), 1)
    cond = override_active(t, ())
    assert (cond.status, cond.reason) == (Status.FALSE, "NoOverrides")


def weights_drained(homes: list[Home], drains: tuple[Drain, ...]) -> list[int]:
    by_cluster = {e.cluster: e.weight for e in table(*homes, drains=drains).entries}
    return [by_cluster[h.cluster] for h in homes]


def test_override_active_message_counts_active_overrides() -> None:
    """manual_drain_test.go::TestReconcile_TrafficDrainAnnotationComposesAndRemovalRestores
    ComputedWeight (its message assertion): OverridesApplied's message contains "2 of 2"
    (OME: "%d of %d traffic-drain annotation override(s) active across %d route arm(s);
    inspect spec.entries[].drainRefs")."""
    both = (Drain("drain-b", "a", "second"), Drain("drain-a", "a", "first"))
    t = table(home("a", 7, 7), home("b", 3, 3), drains=both)
    assert "2 of 2" in override_active(t, both).message


def test_reconcile_traffic_drain_annotation_can_explicitly_zero_every_arm() -> None:
    """manual_drain_test.go::TestReconcile_TrafficDrainAnnotationCanExplicitlyZeroEveryArm:
    drains on both homes -> 0:0 with their refs, Routable False / TrafficDrain."""
    drains = (Drain("drain-a", "a", "regional mitigation"), Drain("drain-b", "b", "regional"))
    t = table(home("a", 7, 7), home("b", 3, 3), drains=drains)
    assert [(e.weight, e.drain_refs) for e in t.entries] == [(0, ("drain-a",)), (0, ("drain-b",))]
    assert reason(t) == (Status.FALSE, "TrafficDrain")


def test_reconcile_pending_traffic_drain_applies_when_arm_becomes_routable() -> None:
    """manual_drain_test.go::TestReconcile_PendingTrafficDrainAppliesWhenArmBecomesRoutable:
    a drain naming b before b is a home is OverridesPending (a keeps 1); when b (3/3)
    arrives it enters its first table at 0 with the ref, OverridesApplied."""
    hold = (Drain("turnup-hold", "b", "hold new cluster until verified"),)
    t = table(home("a", 7, 7), drains=hold)
    assert [e.weight for e in t.entries] == [1]
    cond = override_active(t, hold)
    assert (cond.status, cond.reason) == (Status.FALSE, "OverridesPending")
    t = table(home("a", 7, 7), home("b", 3, 3), drains=hold)
    b = t.entries[1]
    assert (b.cluster, b.weight, b.drain_refs) == ("b", 0, ("turnup-hold",))
    cond = override_active(t, hold)
    assert (cond.status, cond.reason) == (Status.TRUE, "OverridesApplied")


@pytest.mark.parametrize(
    ("failing", "policy", "hold", "want", "status", "why"),
    [
        pytest.param(
            (True, True),
            PRESERVE,
            True,
            [7, 0],
            Status.TRUE,
            "AllHomesProbeFailed",
            id="all-failed PreserveTraffic cannot clear a manual hold",
        ),
        pytest.param(
            (True, True),
            DRAIN,
            True,
            [0, 0],
            Status.FALSE,
            "AllHomesProbeFailed",
            id="all probes failing remains the cause while a manual hold is active",
        ),
        pytest.param(
            (False, False),
            DRAIN,
            True,
            [7, 0],
            Status.TRUE,
            "Routable",
            id="probe recovery cannot clear a manual hold",
        ),
        pytest.param(
            (True, True),
            DRAIN,
            False,
            [0, 0],
            Status.FALSE,
            "AllHomesProbeFailed",
            id="removing a manual hold cannot restore probe-failed homes",
        ),
        pytest.param(
            (False, False),
            DRAIN,
            False,
            [7, 3],
            Status.TRUE,
            "Routable",
            id="recovered homes without manual holds use current capacity",
        ),
        pytest.param(
            (True, False),
            DRAIN,
            True,
            [0, 0],
            Status.FALSE,
            "TrafficDrain",
            id="a manual hold drains the only probe-healthy home",
        ),
    ],
)
def test_build_spec_manual_drains_compose_with_probe_policy(
    failing: tuple[bool, bool],
    policy: AllFailedPolicy,
    hold: bool,
    want: list[int],
    status: Status,
    why: str,
) -> None:
    """manual_drain_test.go::TestBuildSpec_ManualDrainsComposeWithProbePolicy (every case;
    a home not failing has no probe verdict, as upstream, where only failing homes have
    probe state)."""
    drains = (Drain("hold-b", "b", "maintenance"),) if hold else ()
    t = table(
        home("a", 7, 7, reachable=False if failing[0] else None),
        home("b", 3, 3, reachable=False if failing[1] else None),
        policy=policy,
        drains=drains,
    )
    assert [e.weight for e in t.entries] == want
    assert [e.healthy for e in t.entries] == [not f for f in failing]
    assert reason(t, policy) == (status, why)
    assert t.entries[0].drain_refs == ()
    assert t.entries[1].drain_refs == (("hold-b",) if hold else ())


# --- capacity_observability_test.go -----------------------------------------------------


@pytest.mark.parametrize(
    ("homes", "polling", "status", "why"),
    [
        pytest.param((), False, Status.FALSE, "CapacityPollingDisabled", id="disabled"),
        pytest.param((), True, Status.FALSE, "NoCapacityTargets", id="enabled without targets"),
        pytest.param(
            (home("a", 2, 2, reported=2), home("b", 2, 2, reported=2)),
            True,
            Status.FALSE,
            "EndpointCapacityAvailable",
            id="all reports usable",
        ),
        pytest.param(
            (home("a", 2, 2, fallback="unreachable"), home("b", 2, 2, reported=2)),
            True,
            Status.TRUE,
            "EndpointCapacityUnavailable",
            id="one report fell open",
        ),
    ],
)
def test_capacity_fallback_condition(
    homes: tuple[Home, ...], polling: bool, status: Status, why: str
) -> None:
    """capacity_observability_test.go::TestCapacityFallbackCondition (every case; OME's
    constant TrafficMapReasonEndpointCapacityFallback is "EndpointCapacityUnavailable")."""
    cond = capacity_fallback(table(*homes, polling=polling), polling)
    assert (cond.status, cond.reason) == (status, why)


# --- prober_test.go: the gate's hysteresis ----------------------------------------------

F, P, U = ProbeResult.FAILING, ProbeResult.PASSING, ProbeResult.UNKNOWN


def fold(results: list[ProbeResult], thresholds: ProbeThresholds) -> list[ProbeState]:
    state: ProbeState | None = None
    out = []
    for i, r in enumerate(results):
        state = step(state, r, float(i), f"probe {i}", thresholds)
        out.append(state)
    return out


def test_prober_gate_flips_exactly_at_the_threshold() -> None:
    """prober_test.go::TestProber_GateFlipsExactlyAtTheThreshold: failureThreshold 3,
    successThreshold 2: two failures keep the home, the third gates it; one pass keeps
    the gate closed, the second re-opens it."""
    gates = [s.gated for s in fold([F, F, F, P, P], ProbeThresholds(3, 2))]
    assert gates == [False, False, True, True, False]


def test_prober_interrupted_failure_run_does_not_gate() -> None:
    """prober_test.go::TestProber_InterruptedFailureRunDoesNotGate: (F, F, P) x 5."""
    assert not any(s.gated for s in fold([F, F, P] * 5, ProbeThresholds(3, 2)))


def test_prober_inconclusive_never_moves_the_gate() -> None:
    """prober_test.go::TestProber_InconclusiveNeverMovesTheGate: 20 Unknown results give
    no verdict and no gate; Unknown neither resets nor advances a failure run (F, F, U
    keeps the home; the next F gates it)."""
    only_unknown = fold([U] * 20, ProbeThresholds(3, 2))[-1]
    assert (only_unknown.gated, only_unknown.result) == (False, ProbeResult.UNKNOWN)
    run = fold([F, F, U, F], ProbeThresholds(3, 2))
    assert [s.gated for s in run] == [False, False, False, True]


def test_prober_provenance_reports_what_was_observed() -> None:
    """prober_test.go::TestProber_ProvenanceReportsWhatWasObserved: after two 502s (below
    the threshold) the entry's probe block says Failing, consecutiveFailures 2, the last
    message and a lastProbeTime."""
    state: ProbeState | None = None
    for at in (10.0, 20.0):
        state = step(state, F, at, "HTTP 502", ProbeThresholds(3, 2))
    (entry,) = table(Home("a", "https://a.example", 1, 1, probe=state)).entries
    wire = map_entry(entry)
    assert wire.probe is not None
    assert (wire.probe.result, wire.probe.consecutive_failures, wire.probe.message) == (
        "Failing",
        2,
        "HTTP 502",
    )
    assert wire.probe.last_probe_time is not None and not wire.probe.gated


# --- capacity_test.go: the report window ------------------------------------------------

NOW = 10_000.0


def ceiling(readings: list[int], samples: int = 10, quorum: int = 2) -> int | None:
    """OME's `feed`: readings (all fresh) through the last `samples`, then the ceiling."""
    attempts = tuple(Attempt(CapacityReport(r, NOW)) for r in readings)[-samples:]
    return read(attempts, NOW, ReportPolicy(30.0, quorum)).reported


@pytest.mark.parametrize(
    ("readings", "want"),
    [
        pytest.param([0, 7, 7, 7, 7], 7, id="a single zero among healthy readings is ignored"),
        pytest.param([2, 7, 7, 7, 7], 7, id="a single low non-zero reading is ignored"),
        pytest.param([3, 3, 7, 7, 7], 3, id="two agreeing low readings are believed"),
        pytest.param([0, 3, 7, 7, 7], 3, id="a broken reporter does not mask a real pessimist"),
        pytest.param([0, 0, 0, 0], 0, id="a unanimous zero is believed"),
        pytest.param([9, 9, 4, 4], 4, id="a sustained drop is applied once corroborated"),
        pytest.param([4, 4, 9], 4, id="one high reading cannot raise a corroborated ceiling"),
    ],
)
def test_capacity_poller_quorum_tolerates_a_misbehaving_reporter(
    readings: list[int], want: int
) -> None:
    """capacity_test.go::TestCapacityPoller_QuorumToleratesAMisbehavingReporter (every
    case; samples 10, quorum 2: a low reading needs `quorum` readings at or below it)."""
    assert ceiling(readings) == want


def test_capacity_poller_no_ceiling_until_corroborated() -> None:
    """capacity_test.go::TestCapacityPoller_NoCeilingUntilCorroborated: quorum 2, one
    reading -> the plan stands."""
    assert ceiling([0]) is None
    assert ceiling([3]) is None


def test_capacity_poller_window_ages_out_a_stale_low() -> None:
    """capacity_test.go::TestCapacityPoller_WindowAgesOutAStaleLow: samples 3, quorum 2,
    readings 1, 1, 9, 9, 9 -> 9."""
    assert ceiling([1, 1, 9, 9, 9], samples=3) == 9


def test_capacity_poller_failed_poll_releases_the_window() -> None:
    """capacity_test.go::TestCapacityPoller_FailedPollReleasesTheWindow: samples 4, quorum
    2: 2, 2 -> ceiling 2; a failed poll releases it (plan stands) and the old lows do
    not come back: one 9 after it -> still none, a second 9 -> 9."""
    policy = ReportPolicy(30.0, 2)
    ok = [Attempt(CapacityReport(2, NOW)), Attempt(CapacityReport(2, NOW))]
    assert read(tuple(ok), NOW, policy).reported == 2
    failed = [*ok, Attempt(None, "capacity endpoint unreachable")]
    assert read(tuple(failed[-4:]), NOW, policy).reported is None
    once = [*failed, Attempt(CapacityReport(9, NOW))]
    assert read(tuple(once[-4:]), NOW, policy).reported is None
    twice = [*once, Attempt(CapacityReport(9, NOW))]
    assert read(tuple(twice[-4:]), NOW, policy).reported == 9


def test_capacity_poller_fails_open_on_a_stale_report() -> None:
    """capacity_test.go::TestCapacityPoller_FailsOpenOnEveryBadAnswer / "stale report
    beyond maxAge": an hour-old report leaves the plan standing, with a reason. (The
    HTTP and parsing cases: the control conformance file.)"""
    r = read((Attempt(CapacityReport(2, NOW - 3600)),), NOW, ReportPolicy(30.0, 1))
    assert r.reported is None and r.fallback_reason


def test_capacity_poller_accepts_a_fresh_report_and_a_report_of_zero() -> None:
    """capacity_test.go::TestCapacityPoller_AcceptsAFreshReport and ::AcceptsAReportOfZero
    (after parsing): a fresh 3 is used as 3; a fresh 0 is a real signal, not no report."""
    for servable in (3, 0):
        r = read((Attempt(CapacityReport(servable, NOW)),), NOW, ReportPolicy(30.0, 1))
        assert (r.reported, r.fallback_reason) == (servable, None)
