"""`mapStore: kubernetes`: the maps as trafficmaps.ome.io objects through a fake API client.
Spec and status applied apart (the status subresource), the server's generation matching
the loop's count, a `kubectl edit` undone, the finalizer released before the delete, and
an API that fails every call failing the pass by name while the route stays."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml

from gridroute.control.reconcile import Reconciler
from gridroute.control.store import Store
from gridroute.control.store_kubernetes import KubernetesMaps
from gridroute.core.trafficmap import Drain
from gridroute.core.trafficmap_publication import PublishOutcome
from tests.wire.crd_schema import errors, unknown_fields

from .controlfiles import Clock, seed, write
from .fake_kube import FakeDynamicClient

CRD = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "deploy/kubernetes/trafficmaps-crd.yaml").read_text()
)
SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
KEY = ("TrafficMap", "llama-demo", "llama-chat")


def setup(tmp: Path, data: dict | None = None):
    data = data or seed()
    data["mapStore"] = "kubernetes"
    client = FakeDynamicClient()
    maps = KubernetesMaps(client, "gridroute-test", attempts=2, sleep=lambda _: None)
    rec = Reconciler(write(tmp, data), clock=Clock(), maps=maps)
    return rec, client, data


def run(rec: Reconciler):
    return asyncio.run(rec.run_once())


def test_maps_are_cluster_objects_with_status_applied_apart(tmp_path: Path) -> None:
    rec, client, _ = setup(tmp_path)
    assert [s.outcome for s in run(rec).services] == [PublishOutcome.PUBLISHED]
    obj = client.objects[KEY]
    assert errors(obj, SCHEMA) == [] and unknown_fields(obj, SCHEMA) == set()
    assert [e["weight"] for e in obj["spec"]["entries"]] == [2, 1]
    assert obj["metadata"]["finalizers"] == ["ome.io/trafficmap-publisher"]
    assert obj["status"]["published"] and obj["status"]["observedTrafficMapGeneration"] == 1
    kinds = [a["kind"] for a in client.applies]
    assert kinds == ["TrafficMap", "TrafficMap/status"]
    assert all(a["field_manager"] == "gridroute-test" for a in client.applies)
    assert not (tmp_path / "state" / "trafficmaps").exists()  # not in the directory
    listed = Store(tmp_path / "state", rec.store.backend).maps()
    assert [m.metadata.name for m in listed] == ["llama-chat"]


def test_the_servers_generation_moves_with_the_spec_and_is_observed(tmp_path: Path) -> None:
    rec, client, _ = setup(tmp_path)
    run(rec)
    run(rec)
    assert client.objects[KEY]["metadata"]["generation"] == 1  # nothing changed
    rec.store.write_drains("llama-demo", "llama-chat", (Drain("m", "cluster-a", "maintenance"),))
    run(rec)
    obj = client.objects[KEY]
    assert [e["weight"] for e in obj["spec"]["entries"]] == [0, 1]
    assert obj["metadata"]["generation"] == 2
    assert obj["status"]["observedTrafficMapGeneration"] == 2
    assert (tmp_path / "state" / "drains" / "llama-demo" / "llama-chat.json").exists()


def test_a_kubectl_edit_is_undone_on_the_next_pass(tmp_path: Path) -> None:
    rec, client, _ = setup(tmp_path)
    run(rec)
    edited = client.objects[KEY]
    edited["spec"]["entries"][0]["weight"] = 9
    edited["metadata"]["generation"] = 2  # what the API server does on a spec edit
    run(rec)
    obj = client.objects[KEY]
    assert [e["weight"] for e in obj["spec"]["entries"]] == [2, 1]
    assert obj["metadata"]["generation"] == 3
    assert obj["status"]["observedTrafficMapGeneration"] == 3


def test_removal_releases_the_finalizer_then_deletes(tmp_path: Path) -> None:
    rec, client, data = setup(tmp_path)
    run(rec)
    data["services"] = []
    write(tmp_path, data)
    assert [s.outcome for s in run(rec).services] == [PublishOutcome.UNPUBLISHED]
    assert KEY not in client.objects
    assert not (tmp_path / "routes" / "llama-demo" / "llama-chat-global.yaml").exists()


def test_an_unreachable_api_fails_the_pass_by_name_and_leaves_the_route(tmp_path: Path) -> None:
    rec, client, data = setup(tmp_path)
    run(rec)
    route = (tmp_path / "routes" / "llama-demo" / "llama-chat-global.yaml").read_text()
    client.fail_always = True
    data["services"][0]["homes"][1].update(allocated=4, ready=4)
    write(tmp_path, data)
    result = run(rec)
    assert result.services == () and result.errors[0].startswith("store: ")
    assert "apiserver unavailable" in result.errors[0]
    assert (tmp_path / "routes" / "llama-demo" / "llama-chat-global.yaml").read_text() == route
    client.fail_always = False
    assert [s.weights for s in run(rec).services] == [{"cluster-a": 1, "cluster-b": 1}]
