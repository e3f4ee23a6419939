"""`gridroute trafficmap` and `gridroute traffic` driven through the CLI, on a copy of
examples/trafficmap/ (the issue's "done when")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from typer.testing import CliRunner

from gridroute.cli import app
from tests.wire.crd_schema import crd_schema, errors

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "trafficmap" / "control.yaml"
ROUTE = crd_schema("gateway-api/httproutes-crd.yaml", "v1")
runner = CliRunner()


def example(tmp: Path) -> Path:
    path = tmp / "control.yaml"
    shutil.copy(EXAMPLE, path)
    return path


def cli(*args: str):
    return runner.invoke(app, list(args))


def test_reconcile_once_on_the_example_writes_valid_routes_and_get_shows_2_and_1(
    tmp_path: Path,
) -> None:
    config = example(tmp_path)
    result = cli("trafficmap", "reconcile", "--config", str(config), "--once")
    assert result.exit_code == 0, result.output
    assert "llama-demo/llama-chat: Published cluster-a=2 cluster-b=1" in result.output
    route = tmp_path / "routes" / "llama-demo" / "llama-chat-global.yaml"
    objs = list(yaml.safe_load_all(route.read_text()))
    assert errors(objs[0], ROUTE, strict=True) == []
    assert [r["weight"] for r in objs[0]["spec"]["rules"][0]["backendRefs"]] == [2, 1]

    got = cli("trafficmap", "get", "-c", str(config))
    assert got.exit_code == 0, got.output
    head, line = got.output.splitlines()
    assert head.split() == ["NAMESPACE", "NAME", "MODE", "PUBLISHED", "ROUTABLE", "OVERRIDE",
                            "REASON", "ENTRIES", "WEIGHTS", "AGE"]  # fmt: skip
    assert line.split()[:9] == ["llama-demo", "llama-chat", "Split", "True", "True", "False",
                                "Routable", "2", "cluster-a=2,cluster-b=1"]  # fmt: skip

    wide = cli("trafficmap", "get", "llama-chat", "-n", "llama-demo", "-o", "wide",
               "--store", str(tmp_path / "state"))  # fmt: skip
    assert wide.exit_code == 0, wide.output
    assert "llama-demo/llama-chat-global" in wide.output and "1/1 Current" in wide.output

    as_json = json.loads(cli("trafficmap", "get", "llama-chat", "-c", str(config), "-o",
                             "json").output)  # fmt: skip
    assert [e["weight"] for e in as_json["spec"]["entries"]] == [2, 1]
    as_yaml = yaml.safe_load(cli("trafficmap", "get", "-c", str(config), "-o", "yaml").output)
    assert as_yaml["kind"] == "List" and len(as_yaml["items"]) == 1


def test_drain_describe_undrain_round_trip(tmp_path: Path) -> None:
    config = example(tmp_path)
    cli("trafficmap", "reconcile", "-c", str(config), "--once")
    drained = cli("traffic", "drain", "cluster-a", "-c", str(config), "--reason", "planned")
    assert drained.exit_code == 0, drained.output
    out = cli("trafficmap", "reconcile", "-c", str(config), "--once").output
    assert "cluster-a=0 cluster-b=1" in out
    described = cli("trafficmap", "describe", "llama-chat", "-c", str(config))
    assert described.exit_code == 0, described.output
    text = described.output
    assert "cluster-a-drain" in text and "Drained" in text
    assert "OverrideActive        True     OverridesApplied" in text
    assert "Generation:   2 (published: 2; Current)" in text
    assert cli("traffic", "undrain", "cluster-a", "-c", str(config)).exit_code == 0
    out = cli("trafficmap", "reconcile", "-c", str(config), "--once").output
    assert "cluster-a=2 cluster-b=1" in out
    assert cli("traffic", "undrain", "cluster-a", "-c", str(config)).exit_code == 1


def test_drain_of_a_cluster_no_map_has_and_unknown_map(tmp_path: Path) -> None:
    config = example(tmp_path)
    cli("trafficmap", "reconcile", "-c", str(config), "--once")
    missing = cli("traffic", "drain", "cluster-z", "-c", str(config))
    assert missing.exit_code == 1 and "no trafficmap has a home on cluster-z" in missing.output
    nothing = cli("trafficmap", "describe", "nope", "-c", str(config))
    assert nothing.exit_code == 1 and 'trafficmap "nope" not found' in nothing.output


def test_reconcile_once_exits_nonzero_on_a_refused_service_and_2_on_a_bad_file(
    tmp_path: Path,
) -> None:
    config = example(tmp_path)
    cli("trafficmap", "reconcile", "-c", str(config), "--once")
    data = yaml.safe_load(config.read_text())
    data["services"][0]["routing"] = {"capacityFactors": {"cluster-b": -1}}
    config.write_text(yaml.safe_dump(data))
    bad = cli("trafficmap", "reconcile", "-c", str(config), "--once")
    assert bad.exit_code == 1
    assert "services[llama-chat].routing.capacityFactors.cluster-b: must be positive" in (
        bad.output
    )
    assert "InvalidOwner cluster-a=2 cluster-b=1" in bad.output
    config.write_text("services: [")
    assert cli("trafficmap", "reconcile", "-c", str(config), "--once").exit_code == 2
