"""The reconcile loop over the directory store and publisher: the seed's example, drains,
bad edits, publisher failure, hand edits, withdrawal and removal."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest
import yaml

from gridroute.control import publish_directory
from gridroute.control.reconcile import Reconciler
from gridroute.control.store import Store
from gridroute.core.pickers import Picker
from gridroute.core.trafficmap import Drain
from gridroute.core.trafficmap_publication import PublishOutcome
from gridroute.wire.overlay import parse_overlay
from tests.wire.crd_schema import crd_schema, errors

from .controlfiles import Clock, seed, write

ROUTE_SCHEMA = crd_schema("gateway-api/httproutes-crd.yaml", "v1")
MAP_SCHEMA = crd_schema("ome/trafficmaps-crd.yaml", "v1beta1")


def run(rec: Reconciler):
    return asyncio.run(rec.run_once())


def the_map(tmp: Path):
    tm = Store(tmp / "state").read_map("llama-demo", "llama-chat")
    assert tm is not None
    return tm


def route(tmp: Path) -> list[dict]:
    path = tmp / "routes" / "llama-demo" / "llama-chat-global.yaml"
    return list(yaml.safe_load_all(path.read_text()))


def weights(tmp: Path) -> list[int]:
    return [r["weight"] for r in route(tmp)[0]["spec"]["rules"][0]["backendRefs"]]


def cond(tm, kind: str) -> tuple[str, str]:
    c = tm.status.condition(kind)
    assert c is not None, kind
    return c.status, c.reason


def test_seed_example_writes_a_valid_route_and_the_seed_map(tmp_path: Path) -> None:
    rec = Reconciler(write(tmp_path, seed()), clock=Clock())
    result = run(rec)
    assert [(s.outcome, s.weights) for s in result.services] == [
        (PublishOutcome.PUBLISHED, {"cluster-a": 2, "cluster-b": 1})
    ]
    objs = route(tmp_path)
    assert errors(objs[0], ROUTE_SCHEMA) == []
    assert weights(tmp_path) == [2, 1]
    assert [o["kind"] for o in objs] == ["HTTPRoute", "Service", "Service"]
    tm = the_map(tmp_path)
    assert errors(tm.wire(), MAP_SCHEMA) == []
    assert [(e.cluster, e.weight) for e in tm.spec.entries] == [("cluster-a", 2), ("cluster-b", 1)]
    assert cond(tm, "Routable") == ("True", "Routable")
    assert cond(tm, "OverrideActive") == ("False", "NoOverrides")
    assert cond(tm, "CapacityFallback") == ("False", "CapacityPollingDisabled")
    assert cond(tm, "Published") == ("True", "Published")
    assert cond(tm, "PublicationFallback") == ("False", "Unsupported")
    assert tm.status.gateway_ref is not None and tm.status.gateway_ref.name == "llama-chat-global"
    assert tm.metadata.generation == tm.status.observed_traffic_map_generation == 1
    assert tm.metadata.finalizers == ["ome.io/trafficmap-publisher"]


def test_a_pass_without_change_keeps_the_generation(tmp_path: Path) -> None:
    rec = Reconciler(write(tmp_path, seed()), clock=Clock())
    run(rec)
    run(rec)
    assert the_map(tmp_path).metadata.generation == 1


def test_drain_zeroes_one_home_bumps_generation_and_publishes_it(tmp_path: Path) -> None:
    rec = Reconciler(write(tmp_path, seed()), clock=Clock())
    run(rec)
    Store(tmp_path / "state").write_drains(
        "llama-demo", "llama-chat", (Drain("maintenance-a", "cluster-a", "planned"),)
    )
    run(rec)
    tm = the_map(tmp_path)
    assert [e.weight for e in tm.spec.entries] == [0, 1]
    assert tm.spec.entries[0].drain_refs == ["maintenance-a"]
    assert cond(tm, "OverrideActive") == ("True", "OverridesApplied")
    assert weights(tmp_path) == [0, 1]
    assert tm.metadata.generation == tm.status.observed_traffic_map_generation == 2


def test_a_bad_edit_keeps_the_last_table_and_route_and_says_invalid_owner(tmp_path: Path) -> None:
    data = seed()
    path = write(tmp_path, data)
    rec = Reconciler(path, clock=Clock())
    run(rec)
    before = route(tmp_path)
    data["services"][0]["routing"] = {"capacityFactors": {"cluster-a": "0"}}
    data["services"][0]["homes"][0]["ready"] = 1  # would change the weights if applied
    write(tmp_path, data)
    result = run(rec)
    assert result.services[0].outcome is PublishOutcome.INVALID_OWNER
    assert "services[llama-chat].routing.capacityFactors.cluster-a" in result.errors[0]
    tm = the_map(tmp_path)
    assert [e.weight for e in tm.spec.entries] == [2, 1]
    assert cond(tm, "Published") == ("False", "InvalidOwner")
    assert cond(tm, "Routable") == ("True", "Routable")
    assert route(tmp_path) == before  # nothing published is withdrawn by a bad edit


def test_a_malformed_drain_record_stops_the_map_from_moving(tmp_path: Path, caplog) -> None:
    rec = Reconciler(write(tmp_path, seed()), clock=Clock())
    run(rec)
    drains = Store(tmp_path / "state").drain_path("llama-demo", "llama-chat")
    drains.parent.mkdir(parents=True)
    drains.write_text('{"m":{"cluster":"cluster-a","until":"never"}}')
    with caplog.at_level(logging.ERROR):
        result = run(rec)
    assert result.services[0].outcome is PublishOutcome.INVALID_OWNER
    assert "parse ome.io/traffic-drain:" in caplog.text
    assert weights(tmp_path) == [2, 1]
    assert cond(the_map(tmp_path), "Published") == ("False", "InvalidOwner")


def test_an_unreadable_control_yaml_changes_nothing(tmp_path: Path) -> None:
    path = write(tmp_path, seed())
    rec = Reconciler(path, clock=Clock())
    run(rec)
    path.write_text(path.read_text() + "surprise: true\n")
    result = run(rec)
    assert result.errors and "surprise" in result.errors[0]
    assert weights(tmp_path) == [2, 1]
    assert cond(the_map(tmp_path), "Published") == ("True", "Published")


def test_publisher_failure_keeps_the_last_route_and_reports_published_false(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    rec = Reconciler(write(tmp_path, seed()), clock=Clock())
    run(rec)
    before = route(tmp_path)

    def disk_full(path: Path, text: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(publish_directory, "write_atomic", disk_full)
    Store(tmp_path / "state").write_drains(
        "llama-demo", "llama-chat", (Drain("m", "cluster-b", "maintenance"),)
    )
    with caplog.at_level(logging.ERROR):
        result = run(rec)
    assert result.services[0].outcome is PublishOutcome.APPLY_FAILED
    assert "TrafficMap publisher reconciliation failed" in caplog.text
    assert route(tmp_path) == before
    tm = the_map(tmp_path)
    assert cond(tm, "Published") == ("False", "ApplyFailed")
    assert cond(tm, "PublicationFallback") == ("Unknown", "ApplyFailed")
    assert tm.status.gateway_ref is not None  # still names the last route
    # the staleness check of the seed: the map moved on, the publisher did not
    assert (tm.metadata.generation, tm.status.observed_traffic_map_generation) == (2, 1)
    monkeypatch.undo()
    run(rec)
    tm = the_map(tmp_path)
    assert (tm.metadata.generation, tm.status.observed_traffic_map_generation) == (2, 2)
    assert weights(tmp_path) == [2, 0]  # the other weight stays as it is


def test_a_hand_edit_of_the_map_is_undone_on_the_next_pass(tmp_path: Path) -> None:
    rec = Reconciler(write(tmp_path, seed()), clock=Clock())
    run(rec)
    path = Store(tmp_path / "state").map_path("llama-demo", "llama-chat")
    data = yaml.safe_load(path.read_text())
    data["spec"]["entries"][1]["weight"] = 100
    path.write_text(yaml.safe_dump(data))
    run(rec)
    tm = the_map(tmp_path)
    assert [e.weight for e in tm.spec.entries] == [2, 1]
    assert tm.metadata.generation == 2  # the undo is a spec change
    assert weights(tmp_path) == [2, 1]


def test_no_gateway_is_withdrawn_and_removes_the_route(tmp_path: Path) -> None:
    data = seed()
    path = write(tmp_path, data)
    rec = Reconciler(path, clock=Clock())
    run(rec)
    del data["publish"]["globalGateway"]
    write(tmp_path, data)
    result = run(rec)
    assert result.services[0].outcome is PublishOutcome.WITHDRAWN
    assert not (tmp_path / "routes" / "llama-demo" / "llama-chat-global.yaml").exists()
    tm = the_map(tmp_path)
    assert cond(tm, "Published") == ("False", "Withdrawn")
    assert cond(tm, "PublicationFallback") == ("False", "Withdrawn")
    assert tm.status.gateway_ref is None
    assert [e.weight for e in tm.spec.entries] == [2, 1]  # the map is still computed


def test_seventeen_homes_is_invalid_plan_and_keeps_the_last_route(tmp_path: Path) -> None:
    data = seed()
    path = write(tmp_path, data)
    rec = Reconciler(path, clock=Clock())
    run(rec)
    data["services"][0]["homes"] += [
        {"cluster": f"extra-{i}", "endpoint": f"http://e{i}.example.com", "allocated": 1,
         "ready": 1}
        for i in range(15)
    ]  # fmt: skip
    write(tmp_path, data)
    result = run(rec)
    assert result.services[0].outcome is PublishOutcome.INVALID_PLAN
    assert weights(tmp_path) == [2, 1]
    assert cond(the_map(tmp_path), "Published") == ("False", "InvalidPlan")


def test_a_service_removed_from_control_yaml_is_unpublished_and_its_map_deleted(
    tmp_path: Path,
) -> None:
    data = seed()
    path = write(tmp_path, data)
    rec = Reconciler(path, clock=Clock())
    run(rec)
    data["services"] = []
    write(tmp_path, data)
    result = run(rec)
    assert [s.outcome for s in result.services] == [PublishOutcome.UNPUBLISHED]
    assert not (tmp_path / "routes" / "llama-demo" / "llama-chat-global.yaml").exists()
    assert Store(tmp_path / "state").read_map("llama-demo", "llama-chat") is None


def test_routing_disabled_opts_the_service_out(tmp_path: Path) -> None:
    data = seed()
    path = write(tmp_path, data)
    rec = Reconciler(path, clock=Clock())
    run(rec)
    data["services"][0]["routing"] = {"enabled": False}
    write(tmp_path, data)
    assert [s.outcome for s in run(rec).services] == [PublishOutcome.UNPUBLISHED]


def test_overlay_file_is_a_routing_overlay_with_the_maps_weights(tmp_path: Path) -> None:
    data = seed()
    data["publish"]["overlay"] = "overlay.json"
    rec = Reconciler(write(tmp_path, data), clock=Clock())
    run(rec)
    overlay = parse_overlay((tmp_path / "overlay.json").read_text())
    (cap,) = overlay.models
    assert cap.model == "llama-chat" and cap.picker is Picker.WEIGHTED
    assert [(c.site, c.selection_group, c.traffic_weight) for c in cap.candidates] == [
        ("cluster-a", 0, 2), ("cluster-b", 0, 1)
    ]  # fmt: skip
    assert overlay.revision == 1
    assert cond(the_map(tmp_path), "Published") == ("True", "Published")
    run(rec)  # nothing changed: same revision, file untouched
    assert parse_overlay((tmp_path / "overlay.json").read_text()).revision == 1


def test_overlay_follows_a_drain_and_keeps_an_invalid_services_last_weights(
    tmp_path: Path,
) -> None:
    data = seed()
    data["publish"]["overlay"] = "overlay.json"
    data["services"][0]["model"] = "llama-3-8b"
    data["services"][0]["homes"][0]["site"] = "east"
    path = write(tmp_path, data)
    rec = Reconciler(path, clock=Clock())
    run(rec)
    Store(tmp_path / "state").write_drains(
        "llama-demo", "llama-chat", (Drain("m", "cluster-a", "maintenance"),)
    )
    run(rec)
    overlay = parse_overlay((tmp_path / "overlay.json").read_text())
    (cap,) = overlay.models
    assert cap.model == "llama-3-8b" and overlay.revision == 2
    assert [(c.key, c.selection_group, c.admission_state.value, c.traffic_weight)
            for c in cap.candidates] == [
        ("cluster-b/cluster-b", 0, "new_and_existing", 1),
        ("east/east", 1, "existing_only", 0),
    ]  # fmt: skip
    data["services"][0]["routing"] = {"capacityFactors": {"cluster-a": "0"}}
    write(tmp_path, data)
    run(rec)  # refused: InvalidOwner, and the overlay keeps the service as it was
    assert cond(the_map(tmp_path), "Published") == ("False", "InvalidOwner")
    assert parse_overlay((tmp_path / "overlay.json").read_text()) == overlay


@pytest.mark.parametrize(
    ("factors", "expected"),
    [({"cluster-b": "2"}, [1, 1]), ({"cluster-a": "1.5"}, [3, 1]), ({"cluster-b": "500m"}, [4, 1])],
)
def test_capacity_factors_weight_heterogeneous_clusters(tmp_path: Path, factors, expected) -> None:
    data = seed()
    data["services"][0]["routing"] = {"capacityFactors": factors}
    run(Reconciler(write(tmp_path, data), clock=Clock()))
    assert [e.weight for e in the_map(tmp_path).spec.entries] == expected


def test_the_loop_runs_passes_until_stopped(tmp_path: Path) -> None:
    data = seed()
    data["reconcileIntervalSeconds"] = 0.01
    rec = Reconciler(write(tmp_path, data), clock=Clock())
    seen: list[dict[str, int]] = []

    async def body() -> None:
        stop = asyncio.Event()

        def on_pass(result) -> None:
            seen.append(result.services[0].weights)
            if len(seen) == 1:  # an operator drains between passes
                Store(tmp_path / "state").write_drains(
                    "llama-demo", "llama-chat", (Drain("m", "cluster-a", "maintenance"),)
                )
            if len(seen) == 3:
                stop.set()

        await asyncio.wait_for(rec.run(stop, on_pass), timeout=30)

    asyncio.run(body())
    assert seen == [{"cluster-a": 2, "cluster-b": 1}] + [{"cluster-a": 0, "cluster-b": 1}] * 2
