"""The conditions that describe a TrafficMap's table: Routable, OverrideActive and
CapacityFallback (reference 4.4; the reason strings are OME's, which are API).

Each is decided from the computed `Table` alone, first matching rule wins, so the same
table always explains itself the same way. Published and PublicationFallback describe
the publisher, not the table: see `trafficmap_publication`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from gridroute.core.trafficmap import AllFailedPolicy, Drain, Table


class Status(Enum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class ConditionType(Enum):
    ROUTABLE = "Routable"
    OVERRIDE_ACTIVE = "OverrideActive"
    CAPACITY_FALLBACK = "CapacityFallback"
    PUBLISHED = "Published"
    PUBLICATION_FALLBACK = "PublicationFallback"


class RoutableReason(Enum):
    ROUTABLE = "Routable"
    NOT_PLACED = "NotPlaced"
    """Empty table: no cluster has admitted the service."""
    NO_ADDRESSABLE_HOME = "NoAddressableHome"
    """Empty table: homes exist but none reports an endpoint."""
    NO_ROUTABLE_CAPACITY = "NoRoutableCapacity"
    """All zero, a home has ready replicas, but min(allocated, ready) x factor is 0 for
    every entry; also the all-zero table no other reason explains (probe gates on the
    homes that could serve, while not every probe failed)."""
    ALL_HOMES_PROBE_FAILED = "AllHomesProbeFailed"
    """Every probed home failed: True under PreserveTraffic, False under Drain."""
    ALL_HOMES_UNREADY = "AllHomesUnready"
    """All zero and no home has a ready replica. Fails closed: the table stays all-zero,
    traffic is not spread equally."""
    TRAFFIC_DRAIN = "TrafficDrain"
    """All zero only because drains hold every otherwise-positive entry."""


class OverrideReason(Enum):
    OVERRIDES_APPLIED = "OverridesApplied"
    OVERRIDES_PENDING = "OverridesPending"
    """Drains exist but none names a cluster in the table."""
    NO_OVERRIDES = "NoOverrides"


class CapacityFallbackReason(Enum):
    ENDPOINT_CAPACITY_UNAVAILABLE = "EndpointCapacityUnavailable"
    """True (abnormal-true polarity): an entry has no usable capacity report."""
    ENDPOINT_CAPACITY_AVAILABLE = "EndpointCapacityAvailable"
    CAPACITY_POLLING_DISABLED = "CapacityPollingDisabled"
    NO_CAPACITY_TARGETS = "NoCapacityTargets"


@dataclass(frozen=True, slots=True)
class Condition:
    type: ConditionType
    status: Status
    reason: str
    message: str


def _homes(n: int) -> str:
    return f"{n} home(s)"


def routable(table: Table, policy: AllFailedPolicy) -> Condition:
    """Whether a gateway can send the service's requests anywhere, and if not, why.

    OME's order (buildSpec): a positive weight is Routable (AllHomesProbeFailed when
    PreserveTraffic kept it); else drains that zeroed an otherwise-positive table are
    TrafficDrain; else no home with a ready replica is AllHomesUnready; else no home
    with min(allocated, ready) > 0 is NoRoutableCapacity; else every probe failing
    (under Drain) is AllHomesProbeFailed; anything else is NoRoutableCapacity.
    """
    kind, R = ConditionType.ROUTABLE, RoutableReason
    entries = table.entries
    if not table.placed:
        msg = "InferenceService is not Placed; no homes to route to yet"
        return Condition(kind, Status.FALSE, R.NOT_PLACED.value, msg)
    if not entries:
        msg = "no home reports an endpoint; nothing to route to"
        return Condition(kind, Status.FALSE, R.NO_ADDRESSABLE_HOME.value, msg)
    n = _homes(len(entries))
    serving = sum(1 for e in entries if e.weight > 0)
    if serving and table.all_probes_failed:
        msg = (
            f"every probed home failed its health probe; allFailedPolicy PreserveTraffic "
            f"keeps capacity weights: {_homes(serving)} serving"
        )
        return Condition(kind, Status.TRUE, R.ALL_HOMES_PROBE_FAILED.value, msg)
    if serving:
        return Condition(kind, Status.TRUE, R.ROUTABLE.value, f"{_homes(serving)} serving")
    if any(table.pre_drain_weights):
        msg = f"drains hold every home that could serve ({n}); all weights are 0"
        return Condition(kind, Status.FALSE, R.TRAFFIC_DRAIN.value, msg)
    if not any(e.ready > 0 for e in entries):
        msg = f"none of {n} has a ready replica; all weights are 0, traffic is not spread"
        return Condition(kind, Status.FALSE, R.ALL_HOMES_UNREADY.value, msg)
    if not any(min(e.allocated, e.ready) > 0 for e in entries):
        msg = f"min(allocated, ready) is 0 on all {n}; all weights are 0"
        return Condition(kind, Status.FALSE, R.NO_ROUTABLE_CAPACITY.value, msg)
    if table.all_probes_failed:
        msg = (
            "every probed home failed its health probe; "
            f"allFailedPolicy {policy.value} leaves all {n} at weight 0"
        )
        return Condition(kind, Status.FALSE, R.ALL_HOMES_PROBE_FAILED.value, msg)
    msg = (
        f"none of {n} has positive routable capacity: the homes that could serve are "
        "probe-gated and not every probe failed; all weights are 0"
    )
    return Condition(kind, Status.FALSE, R.NO_ROUTABLE_CAPACITY.value, msg)


def override_active(table: Table, drains: tuple[Drain, ...]) -> Condition:
    """Whether drains hold any entry.

    OverridesApplied's message is OME's: "N of M ... override(s) active across K route
    arm(s)", N the distinct drain ids in the entries' drainRefs, M the drains, K the
    entries they hold; then the pending ones by name (gridroute's addition).
    """
    kind = ConditionType.OVERRIDE_ACTIVE
    if not drains:
        return Condition(kind, Status.FALSE, OverrideReason.NO_OVERRIDES.value, "no drains")
    clusters = {e.cluster for e in table.entries}
    applied = {ref for e in table.entries for ref in e.drain_refs}
    arms = sum(1 for e in table.entries if e.drain_refs)
    pending = sorted(f"{d.id} ({d.cluster})" for d in drains if d.cluster not in clusters)
    if not applied:
        msg = f"drain(s) name no home of this map: {', '.join(pending)}"
        return Condition(kind, Status.FALSE, OverrideReason.OVERRIDES_PENDING.value, msg)
    total = len({d.id for d in drains})
    msg = (
        f"{len(applied)} of {total} traffic-drain override(s) active across {arms} route "
        "arm(s); inspect spec.entries[].drainRefs"
    )
    if pending:
        msg += f"; pending: {', '.join(pending)}"
    return Condition(kind, Status.TRUE, OverrideReason.OVERRIDES_APPLIED.value, msg)


def capacity_fallback(table: Table, polling: bool, by_service: bool = False) -> Condition:
    """True when capacity polling is on and an entry has no usable report. `by_service`:
    polling is off by the service's own policy (`routing.capacity.disabled`)."""
    kind, R = ConditionType.CAPACITY_FALLBACK, CapacityFallbackReason
    if not polling:
        which = " for this service (routing.capacity.disabled)" if by_service else ""
        msg = f"capacity polling is disabled{which}; allocations come from the control plane"
        return Condition(kind, Status.FALSE, R.CAPACITY_POLLING_DISABLED.value, msg)
    if not table.entries:
        msg = "no addressable homes require endpoint capacity"
        return Condition(kind, Status.FALSE, R.NO_CAPACITY_TARGETS.value, msg)
    fallbacks = sum(1 for e in table.entries if e.reported is None)
    n = len(table.entries)
    if fallbacks == 0:
        msg = f"endpoint capacity is available for all {_homes(n)}"
        return Condition(kind, Status.FALSE, R.ENDPOINT_CAPACITY_AVAILABLE.value, msg)
    msg = (
        f"{fallbacks} of {_homes(n)} are using control-plane capacity; "
        "inspect spec.entries[].capacity.fallbackReason"
    )
    return Condition(kind, Status.TRUE, R.ENDPOINT_CAPACITY_UNAVAILABLE.value, msg)


def table_conditions(
    table: Table,
    drains: tuple[Drain, ...],
    policy: AllFailedPolicy,
    polling: bool,
    polling_off_by_service: bool = False,
) -> tuple[Condition, Condition, Condition]:
    """Routable, OverrideActive and CapacityFallback for one table."""
    return (
        routable(table, policy),
        override_active(table, drains),
        capacity_fallback(table, polling, polling_off_by_service),
    )
