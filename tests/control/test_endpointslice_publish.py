"""The EndpointSlice fallback and cross-namespace backends, end to end through the
reconcile loop: the workload Gateway's addresses read from its object file every pass,
a home that loses its IP fails the publish while the last route keeps its weights, and
the Kubernetes publisher applies, prunes and removes slices and grants in both
namespaces."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml

from gridroute.config import ConfigError
from gridroute.control.config import load
from gridroute.control.publish_kubernetes import KubernetesPublisher
from gridroute.control.reconcile import Reconciler
from gridroute.control.store import Store
from gridroute.core.trafficmap import Drain
from gridroute.core.trafficmap_publication import PublishOutcome

from .controlfiles import Clock, seed, write
from .fake_kube import FakeDynamicClient


def gateway_object(*addresses: dict[str, str]) -> str:
    return yaml.safe_dump({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": "workload", "namespace": "gateway-system"},
        "spec": {"gatewayClassName": "x", "listeners": []},
        "status": {"addresses": list(addresses)},
    })  # fmt: skip


def slices_config(tmp: Path) -> dict[str, Any]:
    data = seed()
    data["publish"]["backendType"] = "EndpointSlice"
    data["publish"]["workloadGateways"] = {
        "cluster-a": {"addresses": [{"type": "IPAddress", "value": "10.0.0.7"}]},
        "cluster-b": {"file": "gateways/cluster-b.yaml"},
    }
    (tmp / "gateways").mkdir()
    (tmp / "gateways" / "cluster-b.yaml").write_text(
        gateway_object({"type": "Hostname", "value": "lb.example.com"},
                       {"type": "IPAddress", "value": "10.1.0.9"})
    )  # fmt: skip
    return data


def route_objects(tmp: Path) -> list[dict[str, Any]]:
    path = tmp / "routes" / "llama-demo" / "llama-chat-global.yaml"
    return list(yaml.safe_load_all(path.read_text()))


def run(rec: Reconciler):
    return asyncio.run(rec.run_once())


def test_endpoint_slices_follow_the_workload_gateways_status(tmp_path: Path) -> None:
    rec = Reconciler(write(tmp_path, slices_config(tmp_path)), clock=Clock())
    assert [s.outcome for s in run(rec).services] == [PublishOutcome.PUBLISHED]
    objs = route_objects(tmp_path)
    assert [o["kind"] for o in objs] == ["HTTPRoute", "Service", "Service",
                                         "EndpointSlice", "EndpointSlice"]  # fmt: skip
    assert [o["endpoints"][0]["addresses"] for o in objs[3:]] == [["10.0.0.7"], ["10.1.0.9"]]
    (tmp_path / "gateways" / "cluster-b.yaml").write_text(
        gateway_object({"type": "IPAddress", "value": "10.1.0.10"})
    )
    run(rec)
    assert route_objects(tmp_path)[4]["endpoints"][0]["addresses"] == ["10.1.0.10"]


def test_a_home_whose_gateway_has_no_ip_keeps_the_last_route(tmp_path: Path) -> None:
    rec = Reconciler(write(tmp_path, slices_config(tmp_path)), clock=Clock())
    run(rec)
    before = route_objects(tmp_path)
    (tmp_path / "gateways" / "cluster-b.yaml").write_text(
        gateway_object({"type": "Hostname", "value": "lb.example.com"})
    )
    Store(tmp_path / "state").write_drains(
        "llama-demo", "llama-chat", (Drain("m", "cluster-a", "maintenance"),)
    )
    result = run(rec)
    (svc,) = result.services
    assert svc.outcome is PublishOutcome.APPLY_FAILED and "entry cluster-b" in svc.message
    assert "no IP address in status.addresses" in svc.message
    assert route_objects(tmp_path) == before  # the old weights, 2:1, stay published
    tm = Store(tmp_path / "state").read_map("llama-demo", "llama-chat")
    assert tm is not None and [e.weight for e in tm.spec.entries] == [0, 1]
    assert tm.status.condition("Published").reason == "ApplyFailed"
    assert tm.status.observed_traffic_map_generation == tm.metadata.generation - 1
    (tmp_path / "gateways" / "cluster-b.yaml").unlink()
    assert "cannot read" in run(rec).services[0].message


def test_a_bad_workload_gateway_address_refuses_control_yaml(tmp_path: Path) -> None:
    data = slices_config(tmp_path)
    data["publish"]["workloadGateways"]["cluster-a"] = {"addresses": [{"value": "10.0.0.300"}]}
    with pytest.raises(ConfigError, match=r"publish.workloadGateways.cluster-a.addresses.0"):
        load(write(tmp_path, data))
    data["publish"]["workloadGateways"]["cluster-a"] = {}
    with pytest.raises(ConfigError, match="exactly one of addresses and file"):
        load(write(tmp_path, data))


def kube(tmp: Path, data: dict[str, Any]) -> tuple[Reconciler, FakeDynamicClient]:
    data["publish"]["directory"] = None
    data["publish"]["kubernetes"] = {"enabled": True}
    client = FakeDynamicClient()
    pub = KubernetesPublisher(client, "gridroute-test", attempts=1, sleep=lambda _: None)
    return Reconciler(write(tmp, data), clock=Clock(), kubernetes=pub), client


def test_kubernetes_applies_slices_and_grant_before_the_route_and_prunes_both_namespaces(
    tmp_path: Path,
) -> None:
    data = slices_config(tmp_path)
    data["publish"].update(routeNamespace="gateways", backendNamespace="service")
    rec, client = kube(tmp_path, data)
    assert [s.outcome for s in run(rec).services] == [PublishOutcome.PUBLISHED]
    assert [a["kind"] for a in client.applies] == [
        "Service", "Service", "EndpointSlice", "EndpointSlice", "ReferenceGrant", "HTTPRoute"
    ]  # fmt: skip
    where = {(k, ns) for k, ns, _ in client.objects}
    assert where == {("HTTPRoute", "gateways"), ("Service", "llama-demo"),
                     ("EndpointSlice", "llama-demo"), ("ReferenceGrant", "llama-demo")}  # fmt: skip
    data["services"][0]["homes"].pop()  # cluster-b leaves the map
    write(tmp_path, data)
    run(rec)
    assert sorted(k for k, _, _ in client.objects) == [
        "EndpointSlice", "HTTPRoute", "ReferenceGrant", "Service"
    ]  # fmt: skip
    (grant,) = [o for (k, _, _), o in client.objects.items() if k == "ReferenceGrant"]
    assert len(grant["spec"]["to"]) == 1
    data["services"] = []
    write(tmp_path, data)
    assert [s.outcome for s in run(rec).services] == [PublishOutcome.UNPUBLISHED]
    assert client.objects == {}


def test_two_namespaces_services_of_one_name_never_prune_each_other(tmp_path: Path) -> None:
    data = seed()
    data["publish"]["routeNamespace"] = "gateways"
    other = {**data["services"][0], "namespace": "other-team"}
    data["services"].append(other)
    rec, client = kube(tmp_path, data)
    run(rec)
    assert [k for k, ns, _ in client.objects if ns == "gateways"].count("Service") == 4
    data["services"].pop()
    write(tmp_path, data)
    run(rec)  # other-team/llama-chat is finalized; llama-demo's backends stay
    assert [k for k, ns, _ in client.objects if ns == "gateways"].count("Service") == 2
    assert len([k for k, _, _ in client.objects if k == "HTTPRoute"]) == 1
