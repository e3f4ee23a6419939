"""control.yaml refuses bad input with a message naming service, cluster and field."""

from pathlib import Path

import pytest

from gridroute.control.config import ControlConfigError, parse

from .controlfiles import seed


def refused_messages(data: dict) -> list[str]:
    return [r.message for r in parse(data, "control.yaml", Path(".")).refused]


def test_seed_example_is_valid() -> None:
    loaded = parse(seed(), "control.yaml", Path("/x"))
    assert [s.name for s in loaded.services] == ["llama-chat"] and loaded.refused == ()
    assert loaded.path(loaded.config.store) == Path("/x/state")


@pytest.mark.parametrize("factor", [0, "0", -1, "-500m", "fast"])
def test_a_capacity_factor_at_or_below_zero_is_refused_naming_service_cluster_field(factor) -> None:
    data = seed()
    data["services"][0]["routing"] = {"capacityFactors": {"cluster-a": factor}}
    (msg,) = refused_messages(data)
    assert msg.startswith("control.yaml: services[llama-chat].routing.capacityFactors.cluster-a: ")


def test_an_unknown_field_in_a_home_names_service_and_cluster() -> None:
    data = seed()
    data["services"][0]["homes"][1]["weight"] = 7
    (msg,) = refused_messages(data)
    assert msg == (
        "control.yaml: services[llama-chat].homes[cluster-b].weight: "
        "Extra inputs are not permitted (got 7)"
    )


@pytest.mark.parametrize(
    ("probe", "field"),
    [
        ({"failureThreshold": 0}, "failureThreshold"),
        ({"timeoutSeconds": 0}, "timeoutSeconds"),
        ({"acceptStatuses": [700]}, "acceptStatuses"),
        ({"allFailedPolicy": "Panic"}, "allFailedPolicy"),
    ],
)
def test_an_inline_probe_out_of_range_is_refused(probe, field) -> None:
    data = seed()
    data["services"][0]["routing"] = {"probe": probe}
    (msg,) = refused_messages(data)
    assert msg.startswith(f"control.yaml: services[llama-chat].routing.probe.{field}")


def test_probe_timeout_must_be_shorter_than_period() -> None:
    data = seed()
    data["services"][0]["routing"] = {"probe": {"timeoutSeconds": 20, "periodSeconds": 10}}
    (msg,) = refused_messages(data)
    assert "timeoutSeconds must be shorter than periodSeconds" in msg


def test_one_bad_service_does_not_refuse_the_others() -> None:
    data = seed()
    other = seed()["services"][0] | {"name": "other"}
    other["homes"] = [{"cluster": "cluster-a", "allocated": -1, "ready": 1}]
    data["services"].append(other)
    loaded = parse(data, "control.yaml", Path("."))
    assert [s.name for s in loaded.services] == ["llama-chat"]
    assert [r.name for r in loaded.refused] == ["other"]
    assert "services[other].homes[cluster-a].allocated" in loaded.refused[0].message


def test_a_home_needs_ready_or_an_operator() -> None:
    data = seed()
    del data["services"][0]["homes"][0]["ready"]
    (msg,) = refused_messages(data)
    assert "homes[cluster-a]: give ready or an operator" in msg


def test_an_unknown_top_level_field_refuses_the_whole_file() -> None:
    with pytest.raises(ControlConfigError, match=r"control\.yaml: probes: Extra inputs"):
        parse(seed() | {"probes": {}}, "control.yaml", Path("."))
    with pytest.raises(ControlConfigError, match=r"publish\.backendPort"):
        parse(seed() | {"publish": {"backendPort": 0}}, "control.yaml", Path("."))


def test_config_check_recognises_control_yaml_and_names_a_refused_service(tmp_path) -> None:
    from typer.testing import CliRunner

    from gridroute.cli import app

    from .controlfiles import write

    example = Path(__file__).resolve().parents[2] / "examples" / "trafficmap" / "control.yaml"
    res = CliRunner().invoke(app, ["config", "check", str(example)])
    assert res.exit_code == 0 and "control config, 1 services" in res.output, res.output
    data = seed()
    data["services"][0]["homes"][0]["allocated"] = -1
    res = CliRunner().invoke(app, ["config", "check", str(write(tmp_path, data))])
    assert res.exit_code == 2
    assert "services[llama-chat].homes[cluster-a].allocated" in res.output
    res = CliRunner().invoke(app, ["config", "schema", "control"])
    assert res.exit_code == 0 and '"properties"' in res.output
