"""HTTPRoute rendering as the reference publisher writes it, validated against the real
Gateway API v1.6.1 CRDs and Kubernetes' Service schema (reference 4.5)."""

from dataclasses import replace

import kubernetes_validate
import pytest
from crd_schema import crd_schema, errors

from gridroute.core.trafficmap_publication import PublishOutcome
from gridroute.wire.httproute import (
    PlanRefused,
    RouteOptions,
    backend_name,
    claimed_target,
    expand_host_template,
    render,
    route_name,
)
from gridroute.wire.trafficmap import MapEntry, Metadata, Spec, TrafficMap

ROUTE = crd_schema("gateway-api/httproutes-crd.yaml", "v1")
TLS_POLICY = crd_schema("gateway-api/backendtlspolicies-crd.yaml", "v1")
OPTS = RouteOptions(
    global_gateway="gateway-system/global", backend_port=80, hostname="llama-chat.example.com"
)


def seed_map(n: int = 2, weights: tuple[int, ...] = (2, 1)) -> TrafficMap:
    entries = [
        MapEntry(
            cluster=f"cluster-{chr(97 + i)}",
            endpoint=f"http://llama-chat.llama-demo.cluster-{chr(97 + i)}.example.com",
            weight=weights[i] if i < len(weights) else 0,
            healthy=True,
        )
        for i in range(n)
    ]
    return TrafficMap(
        metadata=Metadata(name="llama-chat", namespace="llama-demo", generation=4),
        spec=Spec(service="llama-chat", mode="Split", entries=entries),
    )


def assert_valid(rendered) -> None:
    assert errors(rendered.route, ROUTE, strict=True) == []
    for svc in rendered.services:
        kubernetes_validate.validate(svc, "1.30.0", strict=True)
    for policy in rendered.policies:
        assert errors(policy, TLS_POLICY, strict=True) == []


def test_seed_example_one_rule_one_backend_per_entry_at_its_weight() -> None:
    r = render(seed_map(), OPTS)
    assert_valid(r)
    route = r.route
    assert route["apiVersion"] == "gateway.networking.k8s.io/v1"
    assert route["metadata"]["name"] == "llama-chat-global"
    assert route["metadata"]["namespace"] == "llama-demo"
    assert route["metadata"]["labels"]["ome.io/placement-endpoint-isvc"] == "llama-chat"
    assert route["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "global",
         "namespace": "gateway-system"}
    ]  # fmt: skip
    assert route["spec"]["hostnames"] == ["llama-chat.example.com"]
    (rule,) = route["spec"]["rules"]
    assert rule["matches"] == [{"path": {"type": "PathPrefix", "value": "/"}}]
    assert [ref["weight"] for ref in rule["backendRefs"]] == [2, 1]
    assert all(ref["port"] == 80 and ref["name"].startswith("tmb-") for ref in rule["backendRefs"])
    assert [s["spec"]["externalName"] for s in r.services] == [
        "llama-chat.llama-demo.cluster-a.example.com",
        "llama-chat.llama-demo.cluster-b.example.com",
    ]
    assert all(s["spec"]["type"] == "ExternalName" for s in r.services)
    assert r.policies == []


def test_weight_zero_entries_are_kept_as_backends() -> None:
    r = render(seed_map(3, (1, 0, 0)), OPTS)
    assert_valid(r)
    assert list(r.weights().values()) == [1, 0, 0]


def test_sixteen_entries_render_seventeen_are_invalid_plan() -> None:
    assert_valid(render(seed_map(16, (1,) * 16), OPTS))
    with pytest.raises(PlanRefused) as refused:
        render(seed_map(17, (1,) * 17), OPTS)
    assert refused.value.outcome is PublishOutcome.INVALID_PLAN


@pytest.mark.parametrize(
    "opts",
    [
        RouteOptions(backend_port=80, hostname="h.example.com"),
        RouteOptions(global_gateway="ns/gw", hostname="h.example.com"),
        RouteOptions(global_gateway="ns/gw", backend_port=80),
    ],
)
def test_missing_gateway_port_or_host_is_withdrawn(opts) -> None:
    with pytest.raises(PlanRefused) as refused:
        render(seed_map(), opts)
    assert refused.value.outcome is PublishOutcome.WITHDRAWN


def test_rewrite_hostname_and_backend_tls() -> None:
    opts = RouteOptions(
        global_gateway="gw-ns/gw",
        backend_port=443,
        host_template="{{.Name}}.{{ .Namespace }}.global.example.com",
        rewrite_hostname=True,
        backend_tls=True,
    )
    r = render(seed_map(), opts)
    assert_valid(r)
    assert r.route["spec"]["hostnames"] == ["llama-chat.llama-demo.global.example.com"]
    ref = r.route["spec"]["rules"][0]["backendRefs"][0]
    assert ref["filters"] == [
        {"type": "URLRewrite",
         "urlRewrite": {"hostname": "llama-chat.llama-demo.cluster-a.example.com"}}
    ]  # fmt: skip
    assert len(r.policies) == 2
    assert r.policies[0]["spec"]["targetRefs"][0]["name"] == ref["name"]
    assert r.policies[0]["spec"]["validation"]["wellKnownCACertificates"] == "System"
    with_ca = render(seed_map(), replace(opts, ca_config_map="ca"))
    assert_valid(with_ca)


def test_host_template_refuses_other_fields() -> None:
    with pytest.raises(PlanRefused) as refused:
        expand_host_template("{{.Labels}}.example.com", "a", "b")
    assert refused.value.outcome is PublishOutcome.INVALID_OPTIONS


def test_route_namespace_hashes_the_name_and_names_are_stable() -> None:
    assert route_name("chat", "team", None) == "chat-global"
    hashed = route_name("chat", "team", "gateways")
    assert hashed.startswith("chat-") and hashed.endswith("-global") and len(hashed) == 20
    assert backend_name("ns", "svc", "a") == backend_name("ns", "svc", "a")
    assert backend_name("ns", "svc", "a") != backend_name("ns", "svc", "b")
    r = render(seed_map(), replace(OPTS, route_namespace="gateways"))
    assert_valid(r)
    assert {o["metadata"]["namespace"] for o in r.objects} == {"gateways"}
    assert claimed_target("llama-demo", "llama-chat-global") == (
        "v1:httproute:llama-demo/llama-chat-global"
    )


def test_a_wrong_field_would_be_caught_by_the_schema_check() -> None:
    r = render(seed_map(), OPTS)
    r.route["spec"]["rules"][0]["backendRefs"][0]["weight"] = 2_000_000
    r.route["spec"]["rules"][0]["backendRefz"] = []
    problems = errors(r.route, ROUTE, strict=True)
    assert any("weight" in p for p in problems) and any("backendRefz" in p for p in problems)
