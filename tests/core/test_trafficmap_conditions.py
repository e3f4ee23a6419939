"""Every Routable, OverrideActive, CapacityFallback, Published and PublicationFallback
reason, one row each (reference 4.4), and the zero-weight causes."""

import pytest

from gridroute.core.generation import Currency, Staleness, next_generation
from gridroute.core.probegate import ProbeResult, ProbeState
from gridroute.core.trafficmap import AllFailedPolicy, Drain, Home, MapInput, Mode, compute
from gridroute.core.trafficmap_conditions import (
    Status,
    capacity_fallback,
    override_active,
    routable,
)
from gridroute.core.trafficmap_publication import (
    PublishOutcome,
    publication_fallback,
    published,
)
from gridroute.core.zeroweight import ZeroCause, cause_of

GATED = ProbeState(ProbeResult.FAILING, True, 3, 0, 1.0, "503")
PRESERVE, DRAIN = AllFailedPolicy.PRESERVE_TRAFFIC, AllFailedPolicy.DRAIN


def h(cluster: str, allocated: int = 2, ready: int = 2, **kw: object) -> Home:
    return Home(cluster, f"http://{cluster}", allocated, ready, **kw)  # type: ignore[arg-type]


NOT_PLACED: tuple[Home, ...] = ()
NO_ENDPOINT = (Home("a", None, 2, 2),)


@pytest.mark.parametrize(
    ("homes", "drains", "policy", "status", "reason"),
    [
        ((h("a"), h("b")), (), PRESERVE, Status.TRUE, "Routable"),
        (NOT_PLACED, (), PRESERVE, Status.FALSE, "NotPlaced"),
        (NO_ENDPOINT, (), PRESERVE, Status.FALSE, "NoAddressableHome"),
        ((h("a", 0, 3), h("b", 3, 0)), (), PRESERVE, Status.FALSE, "NoRoutableCapacity"),
        ((h("a", probe=GATED), h("b", 2, 0, probe=GATED)), (), PRESERVE, Status.TRUE,
         "AllHomesProbeFailed"),
        ((h("a", probe=GATED), h("b", probe=GATED)), (), DRAIN, Status.FALSE,
         "AllHomesProbeFailed"),
        ((h("a", probe=GATED), h("b", 0, 2, probe=ProbeState())), (), PRESERVE, Status.FALSE,
         "NoRoutableCapacity"),
        ((h("a", 2, 0), h("b", 3, 0)), (), PRESERVE, Status.FALSE, "AllHomesUnready"),
        ((h("a", 2, 0, probe=GATED), h("b", 0, 0, probe=GATED)), (), DRAIN, Status.FALSE,
         "AllHomesUnready"),
        ((h("a", 2, 0), h("b", 3, 0)), (Drain("m", "a"),), PRESERVE, Status.FALSE,
         "AllHomesUnready"),
        ((h("a"), h("b", 0, 0)), (Drain("m", "a"),), PRESERVE, Status.FALSE, "TrafficDrain"),
    ],
)  # fmt: skip
def test_routable(homes, drains, policy, status, reason) -> None:
    table = compute(MapInput("svc", Mode.SPLIT, homes, drains, policy))
    cond = routable(table, policy)
    assert (cond.status, cond.reason) == (status, reason)
    assert cond.message


def test_routable_messages() -> None:
    table = compute(MapInput("svc", Mode.SPLIT, (h("a"), h("b"))))
    assert routable(table, PRESERVE).message == "2 home(s) serving"
    empty = compute(MapInput("svc", Mode.SPLIT, ()))
    assert routable(empty, PRESERVE).message == (
        "InferenceService is not Placed; no homes to route to yet"
    )


@pytest.mark.parametrize(
    ("drains", "status", "reason"),
    [
        ((), Status.FALSE, "NoOverrides"),
        ((Drain("m", "a"),), Status.TRUE, "OverridesApplied"),
        ((Drain("m", "zz"),), Status.FALSE, "OverridesPending"),
        ((Drain("m", "a"), Drain("n", "zz")), Status.TRUE, "OverridesApplied"),
    ],
)
def test_override_active(drains, status, reason) -> None:
    table = compute(MapInput("svc", Mode.SPLIT, (h("a"), h("b")), drains))
    cond = override_active(table, drains)
    assert (cond.status, cond.reason) == (status, reason)


def test_override_active_message_counts_drains_and_arms() -> None:
    drains = (Drain("m", "a"), Drain("n", "a"), Drain("o", "zz"))
    table = compute(MapInput("svc", Mode.SPLIT, (h("a"), h("b")), drains))
    assert override_active(table, drains).message == (
        "2 of 3 traffic-drain override(s) active across 1 route arm(s); "
        "inspect spec.entries[].drainRefs; pending: o (zz)"
    )


@pytest.mark.parametrize(
    ("homes", "polling", "status", "reason"),
    [
        ((h("a"),), False, Status.FALSE, "CapacityPollingDisabled"),
        (NO_ENDPOINT, True, Status.FALSE, "NoCapacityTargets"),
        ((h("a", reported=2),), True, Status.FALSE, "EndpointCapacityAvailable"),
        ((h("a", reported=2), h("b", fallback_reason="stale: 40s")), True, Status.TRUE,
         "EndpointCapacityUnavailable"),
    ],
)  # fmt: skip
def test_capacity_fallback(homes, polling, status, reason) -> None:
    table = compute(MapInput("svc", Mode.SPLIT, homes, capacity_polling=polling))
    cond = capacity_fallback(table, polling)
    assert (cond.status, cond.reason) == (status, reason)


@pytest.mark.parametrize(
    ("outcome", "pub", "fallback"),
    [
        (PublishOutcome.PUBLISHED, (Status.TRUE, "Published"), (Status.FALSE, "Unsupported")),
        (PublishOutcome.WITHDRAWN, (Status.FALSE, "Withdrawn"), (Status.FALSE, "Withdrawn")),
        (PublishOutcome.UNPUBLISHED, (Status.FALSE, "Unpublished"), (Status.FALSE, "Unpublished")),
        (PublishOutcome.FINALIZING, (Status.FALSE, "Finalizing"), (Status.FALSE, "Finalizing")),
        (PublishOutcome.INVALID_OWNER, (Status.FALSE, "InvalidOwner"),
         (Status.UNKNOWN, "InvalidOwner")),
        (PublishOutcome.INVALID_PLAN, (Status.FALSE, "InvalidPlan"),
         (Status.UNKNOWN, "InvalidPlan")),
        (PublishOutcome.APPLY_FAILED, (Status.FALSE, "ApplyFailed"),
         (Status.UNKNOWN, "ApplyFailed")),
    ],
)  # fmt: skip
def test_publication(outcome, pub, fallback) -> None:
    p, f = published(outcome, "directory"), publication_fallback(outcome)
    assert (p.status, p.reason) == pub
    assert (f.status, f.reason) == fallback


def test_published_message_names_the_publisher() -> None:
    msg = published(PublishOutcome.PUBLISHED, "gatewayapi").message
    assert msg == 'TrafficMap is published by publisher "gatewayapi"'


@pytest.mark.parametrize(
    ("entry_home", "others", "drains", "policy", "cause"),
    [
        (h("a", 2, 0), (h("b"),), (), PRESERVE, ZeroCause.NOT_READY),
        (h("a", 0, 2), (h("b"),), (), PRESERVE, ZeroCause.NOT_ALLOCATED),
        (h("a", 2, 2, reported=0), (h("b"),), (), PRESERVE, ZeroCause.REPORTED_NO_CAPACITY),
        (h("a", probe=GATED), (h("b"),), (), PRESERVE, ZeroCause.PROBE_GATED),
        (h("a", probe=GATED), (h("b", probe=GATED),), (), DRAIN, ZeroCause.PROBE_GATED),
        (h("a", 0, 2, probe=GATED), (h("b", probe=GATED),), (), DRAIN, ZeroCause.NOT_ALLOCATED),
        (h("a"), (h("b"),), (Drain("m", "a"),), PRESERVE, ZeroCause.DRAINED),
        (h("a", 2, 0), (h("b"),), (Drain("m", "a"),), PRESERVE, ZeroCause.NOT_READY),
        (h("a"), (h("b"),), (), PRESERVE, None),
    ],
)  # fmt: skip
def test_zero_weight_cause_first_matching_row(entry_home, others, drains, policy, cause) -> None:
    table = compute(MapInput("svc", Mode.SPLIT, (entry_home, *others), drains, policy))
    entry = next(e for e in table.entries if e.cluster == "a")
    assert cause_of(entry, table) is cause


def test_generation_moves_only_on_a_spec_change_and_staleness() -> None:
    assert next_generation(None, True) == 1
    assert next_generation(4, False) == 4
    assert next_generation(4, True) == 5
    assert Staleness(4, 4).currency is Currency.CURRENT
    assert Staleness(5, 4).currency is Currency.STALE
    assert Staleness(1, None).currency is Currency.NEVER
