"""The TrafficMap resource on the wire: the seed's example, field for field, validated
against OME's CRD (reference 4.1)."""

import yaml
from crd_schema import crd_schema, errors, unknown_fields

from gridroute.core.probegate import ProbeResult, ProbeState
from gridroute.core.trafficmap import AllFailedPolicy, Drain, Home, MapInput, Mode, compute
from gridroute.core.trafficmap_conditions import table_conditions
from gridroute.wire.trafficmap import (
    GatewayRef,
    Metadata,
    Status,
    TrafficMap,
    conditions,
    map_entry,
    rfc3339,
    spec_of,
)

SCHEMA = crd_schema("ome/trafficmaps-crd.yaml", "v1beta1")

SEED = yaml.safe_load(
    """
apiVersion: ome.io/v1beta1
kind: TrafficMap
metadata:
  name: llama-chat
  namespace: llama-demo
  generation: 4
spec:
  service: llama-chat
  mode: Split
  observedISVCGeneration: 7
  entries:
    - cluster: cluster-a
      endpoint: http://llama-chat.llama-demo.cluster-a.example.com
      weight: 2
      healthy: true
      capacity:
        allocated: 4
        ready: 4
        source: ControlPlane
    - cluster: cluster-b
      endpoint: http://llama-chat.llama-demo.cluster-b.example.com
      weight: 1
      healthy: true
      capacity:
        allocated: 2
        ready: 2
        source: ControlPlane
status:
  sourceUID: 0f8e2c1a-5b7d-4e39-9c61-2d4a8b3f7e10
  published: true
  observedTrafficMapGeneration: 4
  gatewayRef:
    group: gateway.networking.k8s.io
    kind: HTTPRoute
    name: llama-chat-global
    namespace: llama-demo
"""
)

# Fields of the later OME Go types that the CRD version in the fixtures does not declare
# (see ../shared/fixtures/README.md): Kubernetes would prune exactly these.
NEWER_THAN_CRD = {"sourceUID", "published", "publisher", "drainRefs", "gated", "policyDigest",
                  "fallbackReason"}  # fmt: skip


def seed_homes() -> tuple[Home, ...]:
    return tuple(
        Home(c, f"http://llama-chat.llama-demo.{c}.example.com", n, n)
        for c, n in (("cluster-a", 4), ("cluster-b", 2))
    )


def built(table_input: MapInput) -> TrafficMap:
    table = compute(table_input)
    spec = spec_of("llama-chat", Mode.SPLIT, 7, [map_entry(e) for e in table.entries])
    return TrafficMap(
        metadata=Metadata(name="llama-chat", namespace="llama-demo", generation=4),
        spec=spec,
        status=Status(
            source_uid="0f8e2c1a-5b7d-4e39-9c61-2d4a8b3f7e10",
            published=True,
            observed_traffic_map_generation=4,
            gateway_ref=GatewayRef(name="llama-chat-global", namespace="llama-demo"),
        ),
    )


def test_computed_seed_example_is_the_seed_yaml_field_for_field() -> None:
    tm = built(MapInput("llama-chat", Mode.SPLIT, seed_homes())).wire()
    assert tm["status"].pop("conditions") == []  # the seed shows the map without them
    assert tm == SEED
    parsed = TrafficMap.model_validate(SEED).wire()
    parsed["status"].pop("conditions")
    assert parsed == SEED


def test_seed_map_validates_against_the_ome_crd() -> None:
    assert errors(SEED, SCHEMA) == []
    assert unknown_fields(SEED, SCHEMA) == {"published", "sourceUID"}


def test_a_full_map_validates_and_only_newer_fields_are_unknown_to_the_crd() -> None:
    homes = list(seed_homes())
    gated = ProbeState(ProbeResult.FAILING, True, 3, 0, 1.7e9, "503 from /v1/models")
    homes[1] = Home(homes[1].cluster, homes[1].endpoint, 2, 0, probe=gated, reported=1)
    inp = MapInput("llama-chat", Mode.SPLIT, tuple(homes), (Drain("m", "cluster-a"),),
                   capacity_polling=True)  # fmt: skip
    tm = built(inp)
    conds = conditions(
        list(table_conditions(compute(inp), inp.drains, AllFailedPolicy.PRESERVE_TRAFFIC, True)),
        [], 1.7e9, 4,
    )  # fmt: skip
    tm = tm.model_copy(update={"status": tm.status.model_copy(update={"conditions": conds})})
    obj = tm.wire()
    assert errors(obj, SCHEMA) == []
    assert unknown_fields(obj, SCHEMA) <= NEWER_THAN_CRD
    entry_b = obj["spec"]["entries"][1]
    assert "ready" not in entry_b["capacity"]  # 0 is left out
    assert entry_b["probe"]["result"] == "Failing" and entry_b["weight"] == 0


def test_condition_transition_time_is_kept_while_status_holds() -> None:
    inp = MapInput("llama-chat", Mode.SPLIT, seed_homes())
    conds = list(table_conditions(compute(inp), (), AllFailedPolicy.PRESERVE_TRAFFIC, False))
    first = conditions(conds, [], 100.0, 1)
    again = conditions(conds, first, 200.0, 2)
    assert [c.last_transition_time for c in again] == [rfc3339(100.0)] * 3
    assert [c.observed_generation for c in again] == [2] * 3
    drained = MapInput("llama-chat", Mode.SPLIT, seed_homes(), (Drain("m", "cluster-a"),))
    moved = conditions(
        list(table_conditions(compute(drained), drained.drains, AllFailedPolicy.PRESERVE_TRAFFIC,
                              False)), again, 300.0, 3)  # fmt: skip
    by_type = {c.type: c for c in moved}
    assert by_type["OverrideActive"].last_transition_time == rfc3339(300.0)
    assert by_type["Routable"].last_transition_time == rfc3339(100.0)
