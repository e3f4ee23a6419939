"""The backends behind a published HTTPRoute: the EndpointSlice fallback (a selector-less
Service and EndpointSlices of the workload Gateway's IPs, validated against Kubernetes'
own schemas) and the ReferenceGrant that cross-namespace backendRefs need."""

from dataclasses import replace

import kubernetes_validate
import pytest
from crd_schema import crd_schema, errors
from referencegrant_schema import SCHEMA as GRANT
from test_httproute import OPTS, ROUTE, seed_map

from gridroute.core.trafficmap_publication import PublishOutcome
from gridroute.wire.httproute import PlanRefused, render
from gridroute.wire.route_backends import ip_addresses

TLS_POLICY = crd_schema("gateway-api/backendtlspolicies-crd.yaml", "v1")
SLICES = replace(
    OPTS,
    backend_type="EndpointSlice",
    addresses={"cluster-a": ("10.0.0.7", "10.0.0.8"), "cluster-b": ("10.1.0.9", "fd00::9")},
)


def assert_valid(r) -> None:
    assert errors(r.route, ROUTE, strict=True) == []
    for obj in [*r.services, *r.endpoint_slices]:
        kubernetes_validate.validate(obj, "1.30.0", strict=True)
    for policy in r.policies:
        assert errors(policy, TLS_POLICY, strict=True) == []
    for grant in r.grants:
        assert errors(grant, GRANT, strict=True) == []


def test_endpoint_slice_backends_hold_the_workload_gateways_ips() -> None:
    r = render(seed_map(), SLICES)
    assert_valid(r)
    assert [s["spec"]["type"] for s in r.services] == ["ClusterIP", "ClusterIP"]
    assert all("selector" not in s["spec"] and "externalName" not in s["spec"]
               for s in r.services)  # fmt: skip
    a, b = (s["metadata"]["name"] for s in r.services)
    got = [(e["metadata"]["name"], e["metadata"]["labels"]["kubernetes.io/service-name"],
            e["addressType"], [x["addresses"][0] for x in e["endpoints"]])
           for e in r.endpoint_slices]  # fmt: skip
    assert got == [
        (f"{a}-ipv4", a, "IPv4", ["10.0.0.7", "10.0.0.8"]),
        (f"{b}-ipv4", b, "IPv4", ["10.1.0.9"]),
        (f"{b}-ipv6", b, "IPv6", ["fd00::9"]),
    ]
    for es in r.endpoint_slices:  # the slice's port is the Service's, by name
        assert es["ports"] == [{"name": "http", "port": 80, "protocol": "TCP"}]
        assert es["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"] == "gridroute.io"
    assert list(r.weights().values()) == [2, 1]  # the route is the same, only backends differ


def test_a_home_without_an_ip_fails_the_publish_naming_it() -> None:
    why = "gw.yaml: no IP address in status.addresses"
    opts = replace(SLICES, addresses={"cluster-a": ("10.0.0.7",)},
                   address_errors={"cluster-b": why})  # fmt: skip
    with pytest.raises(PlanRefused) as refused:
        render(seed_map(), opts)
    assert refused.value.outcome is PublishOutcome.APPLY_FAILED
    assert "entry cluster-b" in str(refused.value) and "gw.yaml" in str(refused.value)
    with pytest.raises(PlanRefused, match="no workload Gateway is configured"):
        render(seed_map(), replace(SLICES, addresses={"cluster-a": ("10.0.0.7",)}))


def test_only_ip_addresses_of_the_gateway_status_count() -> None:
    status = [{"type": "IPAddress", "value": "10.0.0.7"}, {"type": "Hostname", "value": "lb.x"},
              {"value": "fd00::1"}, {"type": "IPAddress", "value": "not-an-ip"},
              {"type": "example.com/named", "value": "10.0.0.8"}]  # fmt: skip
    assert ip_addresses(status) == ("10.0.0.7", "fd00::1")


def test_backends_in_the_service_namespace_get_a_reference_grant() -> None:
    opts = replace(OPTS, route_namespace="gateways", backend_namespace="service",
                   backend_tls=True)  # fmt: skip
    r = render(seed_map(), opts)
    assert_valid(r)
    assert r.route["metadata"]["namespace"] == "gateways"
    refs = r.route["spec"]["rules"][0]["backendRefs"]
    assert {ref["namespace"] for ref in refs} == {"llama-demo"}
    assert {o["metadata"]["namespace"] for o in [*r.services, *r.policies, *r.grants]} == {
        "llama-demo"
    }
    (grant,) = r.grants
    assert grant["spec"]["from"] == [
        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "gateways"}
    ]
    assert grant["spec"]["to"] == [{"group": "", "kind": "Service", "name": ref["name"]}
                                   for ref in refs]  # fmt: skip
    assert r.backend_namespace == "llama-demo"


def test_no_grant_when_nothing_crosses_a_namespace() -> None:
    assert render(seed_map(), replace(OPTS, backend_namespace="service")).grants == []
    same = render(seed_map(), replace(OPTS, route_namespace="gateways"))
    assert same.grants == [] and "namespace" not in same.route["spec"]["rules"][0]["backendRefs"][0]


def test_the_grant_schema_catches_a_wrong_grant() -> None:
    r = render(seed_map(), replace(OPTS, route_namespace="gateways", backend_namespace="service"))
    grant = r.grants[0]
    grant["spec"]["from"][0]["namespace"] = "Not_A_Namespace"
    grant["spec"]["to"] = []
    problems = errors(grant, GRANT, strict=True)
    assert any("from.0.namespace" in p for p in problems) and any("spec.to" in p for p in problems)
