"""The Kubernetes publisher against a fake API client: server-side apply with one field
manager, retries with backoff, the last route kept on failure, pruning and removal."""

from __future__ import annotations

import asyncio
from pathlib import Path

from gridroute.control.publish_kubernetes import KubernetesPublisher
from gridroute.control.reconcile import Reconciler
from gridroute.control.store import Store
from gridroute.core.trafficmap_publication import PublishOutcome

from .controlfiles import Clock, seed, write
from .fake_kube import FakeDynamicClient

ROUTE = ("llama-demo", "llama-chat-global")


def kube_config() -> dict:
    data = seed()
    data["publish"]["directory"] = None
    data["publish"]["kubernetes"] = {"enabled": True, "fieldManager": "gridroute-test"}
    return data


def setup(tmp: Path, data: dict | None = None):
    client = FakeDynamicClient()
    sleeps: list[float] = []
    pub = KubernetesPublisher(client, "gridroute-test", attempts=3, backoff_s=0.2,
                              sleep=sleeps.append)  # fmt: skip
    path = write(tmp, data or kube_config())
    rec = Reconciler(path, clock=Clock(), kubernetes=pub)
    return rec, client, sleeps


def run(rec: Reconciler):
    return asyncio.run(rec.run_once())


def test_server_side_apply_backends_first_then_the_route(tmp_path: Path) -> None:
    rec, client, sleeps = setup(tmp_path)
    result = run(rec)
    assert result.services[0].outcome is PublishOutcome.PUBLISHED
    assert [a["kind"] for a in client.applies] == ["Service", "Service", "HTTPRoute"]
    assert all(a["field_manager"] == "gridroute-test" and a["force_conflicts"]
               for a in client.applies)  # fmt: skip
    assert client.route_weights(*ROUTE) == [2, 1]
    tm = Store(tmp_path / "state").read_map("llama-demo", "llama-chat")
    assert tm is not None and tm.status.publisher is not None
    assert tm.status.publisher.publisher_name == "kubernetes"
    assert sleeps == []


def test_transient_errors_are_retried_with_backoff(tmp_path: Path) -> None:
    rec, client, sleeps = setup(tmp_path)
    client.fail_next = 2
    assert run(rec).services[0].outcome is PublishOutcome.PUBLISHED
    assert sleeps == [0.2, 0.4]


def test_a_failing_apiserver_keeps_the_last_route_and_reports_apply_failed(
    tmp_path: Path,
) -> None:
    data = kube_config()
    rec, client, _ = setup(tmp_path, data)
    run(rec)
    data["services"][0]["homes"][1].update(allocated=4, ready=4)
    write(tmp_path, data)
    client.fail_always = True
    result = run(rec)
    assert result.services[0].outcome is PublishOutcome.APPLY_FAILED
    assert client.route_weights(*ROUTE) == [2, 1]
    tm = Store(tmp_path / "state").read_map("llama-demo", "llama-chat")
    assert tm is not None
    assert [e.weight for e in tm.spec.entries] == [1, 1]
    published = tm.status.condition("Published")
    assert published is not None and published.reason == "ApplyFailed"
    assert (tm.metadata.generation, tm.status.observed_traffic_map_generation) == (2, 1)
    client.fail_always = False
    run(rec)
    assert client.route_weights(*ROUTE) == [1, 1]


def test_a_home_leaving_the_map_has_its_backend_pruned(tmp_path: Path) -> None:
    data = kube_config()
    rec, client, _ = setup(tmp_path, data)
    run(rec)
    assert client.kinds().count("Service") == 2
    data["services"][0]["homes"].pop()
    write(tmp_path, data)
    run(rec)
    assert client.kinds().count("Service") == 1
    assert client.route_weights(*ROUTE) == [1]


def test_removal_deletes_route_and_backends_before_the_map(tmp_path: Path) -> None:
    data = kube_config()
    rec, client, _ = setup(tmp_path, data)
    run(rec)
    data["services"] = []
    write(tmp_path, data)
    client.fail_always = True
    result = run(rec)
    assert [s.outcome for s in result.services] == [PublishOutcome.UNPUBLISH_FAILED]
    held = Store(tmp_path / "state").read_map("llama-demo", "llama-chat")
    assert held is not None  # the finalizer holds the map until the route is gone
    assert held.metadata.finalizers == ["ome.io/trafficmap-publisher"]
    client.fail_always = False
    result = run(rec)
    assert [s.outcome for s in result.services] == [PublishOutcome.UNPUBLISHED]
    assert client.objects == {}
    assert Store(tmp_path / "state").read_map("llama-demo", "llama-chat") is None
