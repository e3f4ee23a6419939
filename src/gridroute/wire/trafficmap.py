"""The TrafficMap resource (`ome.io/v1beta1`) as pydantic models, and the core table
turned into one (reference 4.1).

Field names are OME's, camelCase on the wire. The map leaves out `allocated` and
`ready` when they are 0 (seed) and `factor` when it is 1. Entries are sorted by cluster;
an entry's cluster must be a DNS label (a map naming any other is refused).
Conditions carry `lastTransitionTime`, kept from the previous map while a condition's
status does not change, as Kubernetes conditions do.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from gridroute.core.probegate import ProbeState
from gridroute.core.quantity import format_quantity
from gridroute.core.trafficmap import Entry, Mode
from gridroute.core.trafficmap_conditions import Condition

API_VERSION: Final = "ome.io/v1beta1"
KIND: Final = "TrafficMap"
CONDITION_ORDER = (
    "Routable",
    "OverrideActive",
    "CapacityFallback",
    "Published",
    "PublicationFallback",
)


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )

    def wire(self) -> dict[str, Any]:
        """JSON-ready dict, camelCase, unset optional fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class Capacity(_Model):
    allocated: int | None = Field(None, ge=1)
    ready: int | None = Field(None, ge=1)
    factor: str | None = None
    source: Literal["ControlPlane", "Endpoint"] = "ControlPlane"
    reported: int | None = Field(None, ge=0)
    fallback_reason: str | None = None


class Probe(_Model):
    policy_digest: str | None = Field(None, pattern=r"^sha256:[0-9a-f]{64}$")
    result: Literal["Passing", "Failing", "Unknown"] = "Unknown"
    gated: bool | None = None
    consecutive_failures: int | None = Field(None, ge=0)
    last_probe_time: str | None = None
    message: str | None = None


DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
"""A Kubernetes DNS label (at most 63 characters): the one rule for control.yaml's names,
map entries' clusters, drain IDs and clusters, and each label of a hostname."""
DNS_LABEL = re.compile(DNS_LABEL_PATTERN)


def _cluster_name(value: str) -> str:
    if not DNS_LABEL.match(value):
        raise ValueError(
            "must be a DNS label (lowercase letters, digits and '-', starting and ending "
            "with a letter or digit, at most 63 characters), as control.yaml's cluster names"
        )
    return value


ClusterName = Annotated[str, AfterValidator(_cluster_name)]
"""A workload cluster's name: a DNS label, as control.yaml's `Name` (OME allows a DNS-1123
subdomain that fits a label value; gridroute's cluster names have no dots)."""


class MapEntry(_Model):
    cluster: ClusterName
    endpoint: str | None = None
    weight: int = Field(0, ge=0, le=1_000_000)
    healthy: bool = False
    capacity: Capacity | None = None
    probe: Probe | None = None
    drain_refs: list[str] | None = None


class Spec(_Model):
    service: str
    mode: Literal["Single", "All", "Split"] | None = None
    observed_isvc_generation: int | None = Field(None, alias="observedISVCGeneration")
    entries: list[MapEntry] = []


class MapCondition(_Model):
    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    message: str
    last_transition_time: str
    observed_generation: int | None = Field(None, ge=0)


class GatewayRef(_Model):
    group: str = "gateway.networking.k8s.io"
    kind: str = "HTTPRoute"
    name: str
    namespace: str | None = None


class Publisher(_Model):
    publisher_name: str
    claimed_targets: list[str] = []


class Status(_Model):
    source_uid: str | None = Field(None, alias="sourceUID")
    published: bool | None = None
    observed_traffic_map_generation: int | None = None
    gateway_ref: GatewayRef | None = None
    publisher: Publisher | None = None
    conditions: list[MapCondition] = []

    def condition(self, kind: str) -> MapCondition | None:
        return next((c for c in self.conditions if c.type == kind), None)


class Metadata(_Model):
    name: str
    namespace: str = "default"
    generation: int = Field(1, ge=1)
    creation_timestamp: str | None = None
    uid: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None


class TrafficMap(_Model):
    api_version: Literal["ome.io/v1beta1"] = API_VERSION
    kind: Literal["TrafficMap"] = KIND
    metadata: Metadata
    spec: Spec
    status: Status = Status()


def rfc3339(at: float) -> str:
    """Seconds since the epoch as Kubernetes writes a time (UTC, whole seconds, `Z`)."""
    stamp = dt.datetime.fromtimestamp(int(at), tz=dt.UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def _probe(state: ProbeState | None, digest: str | None) -> Probe | None:
    if state is None:
        return None
    return Probe(
        policy_digest=digest,
        result=state.result.value,
        gated=state.gated or None,
        consecutive_failures=state.consecutive_failures or None,
        last_probe_time=None if state.last_probe_at is None else rfc3339(state.last_probe_at),
        message=state.message or None,
    )


def map_entry(entry: Entry, probe_digest: str | None = None) -> MapEntry:
    """One core entry on the wire: counts of 0 and a factor of 1 left out."""
    return MapEntry(
        cluster=entry.cluster,
        endpoint=entry.endpoint,
        weight=entry.weight,
        healthy=entry.healthy,
        capacity=Capacity(
            allocated=entry.allocated or None,
            ready=entry.ready or None,
            factor=None if entry.factor == 1 else format_quantity(entry.factor),
            source=entry.source.value,
            reported=entry.reported,
            fallback_reason=entry.fallback_reason,
        ),
        probe=_probe(entry.probe, probe_digest),
        drain_refs=list(entry.drain_refs) or None,
    )


def spec_of(service: str, mode: Mode, isvc_generation: int, entries: list[MapEntry]) -> Spec:
    return Spec(
        service=service,
        mode=mode.value,
        observed_isvc_generation=isvc_generation,
        entries=sorted(entries, key=lambda e: e.cluster),
    )


def conditions(
    new: list[Condition], prior: list[MapCondition], at: float, generation: int
) -> list[MapCondition]:
    """`new` on the wire, keeping each prior lastTransitionTime while its status holds;
    prior conditions of other types (the publisher's, say) are kept as they are."""
    by_type = {c.type: c for c in prior}
    out = dict(by_type)
    for cond in new:
        before = by_type.get(cond.type.value)
        same = before is not None and before.status == cond.status.value
        out[cond.type.value] = MapCondition(
            type=cond.type.value,
            status=cond.status.value,
            reason=cond.reason,
            message=cond.message,
            last_transition_time=before.last_transition_time
            if same and before is not None
            else rfc3339(at),
            observed_generation=generation,
        )
    order = {name: i for i, name in enumerate(CONDITION_ORDER)}
    return sorted(out.values(), key=lambda c: (order.get(c.type, len(order)), c.type))
