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
    """All zero: min(allocated, ready) x factor is 0 for every entry."""
    ALL_HOMES_PROBE_FAILED = "AllHomesProbeFailed"
    """Every probed home failed: True under PreserveTraffic, False under Drain."""
    ALL_HOMES_UNREADY = "AllHomesUnready"
    """All zero before drains, for any other cause (probe gates on every home that could
    serve). Fails closed: the table stays all-zero, traffic is not spread equally."""
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
    """Whether a gateway can send the service's requests anywhere, and if not, why."""
    kind, R = ConditionType.ROUTABLE, RoutableReason
    entries = table.entries
    if not table.placed:
        msg = "InferenceService is not Placed; no homes to route to yet"
        return Condition(kind, Status.FALSE, R.NOT_PLACED.value, msg)
    if not entries:
        msg = "no home reports an endpoint; nothing to route to"
        return Condition(kind, Status.FALSE, R.NO_ADDRESSABLE_HOME.value, msg)
    if not any(e.servable for e in entries):
        msg = f"min(allocated, ready) is 0 on all {_homes(len(entries))}"
        return Condition(kind, Status.FALSE, R.NO_ROUTABLE_CAPACITY.value, msg)
    if table.all_probes_failed and policy is AllFailedPolicy.DRAIN:
        msg = (
            "every probed home failed its health probe; "
            f"allFailedPolicy Drain zeroes all {_homes(len(entries))}"
        )
        return Condition(kind, Status.FALSE, R.ALL_HOMES_PROBE_FAILED.value, msg)
    if not any(table.pre_drain_weights):
        msg = f"all {_homes(len(entries))} have weight 0; traffic is dropped, not spread equally"
        return Condition(kind, Status.FALSE, R.ALL_HOMES_UNREADY.value, msg)
    serving = sum(1 for e in entries if e.weight > 0)
    if serving == 0:
        msg = f"drains hold every home that could serve ({_homes(len(entries))})"
        return Condition(kind, Status.FALSE, R.TRAFFIC_DRAIN.value, msg)
    if table.all_probes_failed:
        msg = (
            f"every probed home failed its health probe; allFailedPolicy PreserveTraffic "
            f"keeps capacity weights: {_homes(serving)} serving"
        )
        return Condition(kind, Status.TRUE, R.ALL_HOMES_PROBE_FAILED.value, msg)
    return Condition(kind, Status.TRUE, R.ROUTABLE.value, f"{_homes(serving)} serving")


def override_active(table: Table, drains: tuple[Drain, ...]) -> Condition:
    """Whether drains hold any entry."""
    kind = ConditionType.OVERRIDE_ACTIVE
    if not drains:
        return Condition(kind, Status.FALSE, OverrideReason.NO_OVERRIDES.value, "no drains")
    clusters = {e.cluster for e in table.entries}
    applied = sorted(d.id for d in drains if d.cluster in clusters)
    pending = sorted(f"{d.id} ({d.cluster})" for d in drains if d.cluster not in clusters)
    if not applied:
        msg = f"drain(s) name no home of this map: {', '.join(pending)}"
        return Condition(kind, Status.FALSE, OverrideReason.OVERRIDES_PENDING.value, msg)
    held = sorted({e.cluster for e in table.entries if e.drain_refs})
    msg = f"drain(s) {', '.join(applied)} hold {', '.join(held)} at weight 0"
    if pending:
        msg += f"; pending: {', '.join(pending)}"
    return Condition(kind, Status.TRUE, OverrideReason.OVERRIDES_APPLIED.value, msg)


def capacity_fallback(table: Table, polling: bool) -> Condition:
    """True when capacity polling is on and an entry has no usable report."""
    kind, R = ConditionType.CAPACITY_FALLBACK, CapacityFallbackReason
    if not polling:
        msg = "capacity polling is disabled; allocations come from the control plane"
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
    table: Table, drains: tuple[Drain, ...], policy: AllFailedPolicy, polling: bool
) -> tuple[Condition, Condition, Condition]:
    """Routable, OverrideActive and CapacityFallback for one table."""
    return (
        routable(table, policy),
        override_active(table, drains),
        capacity_fallback(table, polling),
    )
