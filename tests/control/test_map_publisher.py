"""TrafficMaps as Kubernetes object files: read (files, directories, multi-document,
`List`), refused with the file, map and field named, published by `trafficmap publish`,
their status written back with the spec untouched, and `gridroute config check` on them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gridroute.cli import app
from gridroute.config import ConfigError
from gridroute.control.map_objects import check, read, write_status
from gridroute.control.map_publisher import MapPublisher
from gridroute.control.store import Store
from gridroute.core.trafficmap_publication import PublishOutcome
from gridroute.wire.trafficmap import Status
from tests.wire.crd_schema import crd_schema, errors

from .controlfiles import Clock

ROUTE_SCHEMA = crd_schema("gateway-api/httproutes-crd.yaml", "v1")

SEED_MAP: dict[str, Any] = yaml.safe_load(
    """
apiVersion: ome.io/v1beta1
kind: TrafficMap
metadata: {name: llama-chat, namespace: llama-demo, generation: 4}
spec:
  service: llama-chat
  mode: Split
  observedISVCGeneration: 7
  entries:
    - cluster: cluster-a
      endpoint: http://llama-chat.llama-demo.cluster-a.example.com
      weight: 2
      healthy: true
      capacity: {allocated: 4, ready: 4, source: ControlPlane}
    - cluster: cluster-b
      endpoint: http://llama-chat.llama-demo.cluster-b.example.com
      weight: 1
      healthy: true
      capacity: {allocated: 2, ready: 2, source: ControlPlane}
"""
)
PUBLISH = {
    "store": "state",
    "publish": {
        "directory": "routes",
        "globalGateway": "gateway-system/global",
        "backendPort": 80,
        "globalHostTemplate": "{{.Name}}.{{.Namespace}}.global.example.com",
    },
}


def seed_map() -> dict[str, Any]:
    return copy.deepcopy(SEED_MAP)


def setup(tmp: Path, *docs: Any) -> tuple[Path, Path]:
    (tmp / "maps").mkdir()
    maps = tmp / "maps" / "llama-chat.yaml"
    maps.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    config = tmp / "publish.yaml"
    config.write_text(yaml.safe_dump(PUBLISH))
    return maps, config


def route_weights(tmp: Path) -> list[int]:
    route = next(yaml.safe_load_all((tmp / "routes/llama-demo/llama-chat-global.yaml").read_text()))
    assert errors(route, ROUTE_SCHEMA) == []
    return [b["weight"] for b in route["spec"]["rules"][0]["backendRefs"]]


def cond(status: dict[str, Any], kind: str) -> tuple[str, str]:
    (c,) = [c for c in status["conditions"] if c["type"] == kind]
    return c["status"], c["reason"]


# --- reading ------------------------------------------------------------------------------


def test_reads_documents_lists_and_directories_leaving_other_kinds_alone(tmp_path: Path) -> None:
    other = seed_map()
    other["metadata"]["name"] = "other"
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}}
    (tmp_path / "a.yaml").write_text(yaml.safe_dump_all([svc, seed_map()]))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.json").write_text(
        yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": [other]})
    )
    found = read([tmp_path])
    assert [(m.key, m.path.name, m.document, m.item) for m in found.maps] == [
        (("llama-demo", "llama-chat"), "a.yaml", 1, None),
        (("llama-demo", "other"), "b.json", 0, 0),
    ]
    assert found.refused == ()


def test_a_bad_map_is_refused_naming_file_map_and_field(tmp_path: Path) -> None:
    bad = seed_map()
    bad["spec"]["entries"][0]["weight"] = -1
    bad["spec"]["entries"][1]["colour"] = "red"
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(bad))
    with pytest.raises(ConfigError) as exc:
        check([path])
    assert str(exc.value).splitlines() == [
        f"{path}: trafficmap[llama-demo/llama-chat].spec.entries[cluster-a].weight: "
        "Input should be greater than or equal to 0 (got -1)",
        f"{path}: trafficmap[llama-demo/llama-chat].spec.entries[cluster-b].colour: "
        "Extra inputs are not permitted (got 'red')",
    ]


def test_a_cluster_twice_and_a_file_without_maps_are_refused(tmp_path: Path) -> None:
    twice = seed_map()
    twice["spec"]["entries"][1]["cluster"] = "cluster-a"
    (tmp_path / "twice.yaml").write_text(yaml.safe_dump(twice))
    with pytest.raises(ConfigError, match=r"spec.entries: each cluster once .*cluster-a"):
        check([tmp_path / "twice.yaml"])
    (tmp_path / "svc.yaml").write_text("kind: Service\n")
    with pytest.raises(ConfigError, match="no TrafficMap object"):
        read([tmp_path / "svc.yaml"])


def test_write_status_replaces_only_the_status(tmp_path: Path) -> None:
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x"}}
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump_all([svc, seed_map()], sort_keys=False))
    (obj,) = read([path]).maps
    assert write_status(obj, Status(published=True, observed_traffic_map_generation=4))
    docs = list(yaml.safe_load_all(path.read_text()))
    assert docs[0] == svc
    assert docs[1]["spec"] == SEED_MAP["spec"] and docs[1]["metadata"] == SEED_MAP["metadata"]
    assert docs[1]["status"] == {
        "published": True, "observedTrafficMapGeneration": 4, "conditions": []
    }  # fmt: skip
    mtime = path.stat().st_mtime_ns
    assert not write_status(obj, Status(published=True, observed_traffic_map_generation=4))
    assert path.stat().st_mtime_ns == mtime


# --- publishing ---------------------------------------------------------------------------


def test_publishes_the_route_and_writes_the_publishers_status_back(tmp_path: Path) -> None:
    maps, config = setup(tmp_path, seed_map())
    results, errs = MapPublisher(config, [tmp_path / "maps"], clock=Clock()).run_once()
    assert errs == [] and [(r.outcome, r.weights) for r in results] == [
        (PublishOutcome.PUBLISHED, {"cluster-a": 2, "cluster-b": 1})
    ]
    assert route_weights(tmp_path) == [2, 1]
    doc = yaml.safe_load(maps.read_text())
    assert doc["spec"] == SEED_MAP["spec"] and doc["metadata"] == SEED_MAP["metadata"]
    status = doc["status"]
    assert status["published"] is True and status["observedTrafficMapGeneration"] == 4
    assert status["gatewayRef"]["name"] == "llama-chat-global"
    assert cond(status, "Published") == ("True", "Published")
    assert cond(status, "PublicationFallback") == ("False", "Unsupported")
    copy_ = Store(tmp_path / "state").read_map("llama-demo", "llama-chat")
    assert copy_ is not None and copy_.status.published  # `trafficmap get` sees it


def test_the_writers_new_generation_is_published_and_observed(tmp_path: Path) -> None:
    maps, config = setup(tmp_path, seed_map())
    pub = MapPublisher(config, [tmp_path / "maps"], clock=Clock())
    pub.run_once()
    doc = yaml.safe_load(maps.read_text())
    doc["metadata"]["generation"] = 5
    doc["spec"]["entries"][0]["weight"] = 0  # the writer drained cluster-a
    maps.write_text(yaml.safe_dump(doc, sort_keys=False))
    pub.run_once()
    assert route_weights(tmp_path) == [0, 1]
    status = yaml.safe_load(maps.read_text())["status"]
    assert status["observedTrafficMapGeneration"] == 5


def test_a_bad_edit_keeps_the_route_and_says_invalid_owner(tmp_path: Path) -> None:
    maps, config = setup(tmp_path, seed_map())
    pub = MapPublisher(config, [tmp_path / "maps"], clock=Clock())
    pub.run_once()
    doc = yaml.safe_load(maps.read_text())
    doc["spec"]["entries"][0]["weight"] = "lots"
    maps.write_text(yaml.safe_dump(doc, sort_keys=False))
    results, errs = pub.run_once()
    assert [r.outcome for r in results] == [PublishOutcome.INVALID_OWNER]
    assert "spec.entries[cluster-a].weight" in errs[0]
    assert route_weights(tmp_path) == [2, 1]  # nothing withdrawn by a bad edit
    held = Store(tmp_path / "state").read_map("llama-demo", "llama-chat")
    assert held is not None and held.status.condition("Published").reason == "InvalidOwner"


def test_a_map_gone_from_the_files_is_unpublished(tmp_path: Path) -> None:
    maps, config = setup(tmp_path, seed_map())
    pub = MapPublisher(config, [tmp_path / "maps"], clock=Clock())
    pub.run_once()
    maps.unlink()
    results, _ = pub.run_once()
    assert [r.outcome for r in results] == [PublishOutcome.UNPUBLISHED]
    assert not (tmp_path / "routes/llama-demo/llama-chat-global.yaml").exists()
    assert Store(tmp_path / "state").read_map("llama-demo", "llama-chat") is None


def test_a_publish_config_with_services_is_refused(tmp_path: Path) -> None:
    _, config = setup(tmp_path, seed_map())
    config.write_text(yaml.safe_dump({**PUBLISH, "services": [{"name": "x"}]}))
    with pytest.raises(ConfigError, match="services: a publish-only config lists no services"):
        MapPublisher(config, [tmp_path / "maps"])


# --- the command line ---------------------------------------------------------------------


def test_cli_publish_once_and_config_check(tmp_path: Path) -> None:
    maps, config = setup(tmp_path, seed_map())
    runner = CliRunner()
    out = runner.invoke(app, ["trafficmap", "publish", str(maps), "-c", str(config), "--once"])
    assert out.exit_code == 0, out.output
    assert "llama-demo/llama-chat: Published cluster-a=2 cluster-b=1" in out.output
    checked = runner.invoke(app, ["config", "check", str(maps)])
    assert checked.exit_code == 0, checked.output
    assert "1 TrafficMap object(s): llama-demo/llama-chat" in checked.output
    assert runner.invoke(app, ["config", "check", str(tmp_path / "maps")]).exit_code == 0
    doc = yaml.safe_load(maps.read_text())
    doc["spec"]["mode"] = "Sometimes"
    maps.write_text(yaml.safe_dump(doc))
    bad = runner.invoke(app, ["config", "check", str(maps)])
    assert bad.exit_code == 2
    assert "trafficmap[llama-demo/llama-chat].spec.mode" in bad.output
    failed = runner.invoke(app, ["trafficmap", "publish", str(maps), "-c", str(config), "--once"])
    assert failed.exit_code == 1 and "InvalidOwner" in failed.output
