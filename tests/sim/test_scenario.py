"""Scenario files: the defaults are the seed run, and every mistake names file and field."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gridroute.cli import app
from gridroute.config import ConfigError
from gridroute.core import Policy
from gridroute.sim.scenario import load_scenario, parse_scenario

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def test_defaults_are_the_seed_run() -> None:
    sc = parse_scenario({})
    assert [(s.name, s.slots) for s in sc.sites] == [("hub", 128), ("west", 128), ("east", 64)]
    assert sc.duration_s == 44.6
    assert sc.client_counts == [64, 128, 256]
    assert sc.service.distribution == "constant" and sc.service.mean_s == 0.2
    assert sc.policies == [Policy.FIRST, Policy.SATURATION, Policy.GRIDROUTE]
    assert sc.scrape_interval_s == 1.0 and sc.poll_interval_s == 1.0
    assert sc.gateway_shares == [1.0]


def test_seed_file_equals_defaults() -> None:
    assert load_scenario(EXAMPLES / "seed-partition.yaml") == parse_scenario({})


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_validates(path: Path) -> None:
    load_scenario(path)


def test_gateways_placed_round_robin_and_shares() -> None:
    sc = parse_scenario({"gateways": [0.7, 0.1, 0.1, 0.1]})
    assert sc.placement == ["hub", "west", "east", "hub"]
    assert parse_scenario({"gateways": 4}).gateway_shares == [0.25] * 4


@pytest.mark.parametrize(
    ("data", "field", "reason"),
    [
        ({"sites": [{"name": "hub", "slots": 0}]}, "sites.0.slots", "greater than 0"),
        ({"colour": "red"}, "colour", "Extra inputs are not permitted"),
        ({"gateways": [0.5, 0.4]}, "gateways", "sum to 1"),
        ({"clients": [64, 0]}, "clients", "at least 1"),
        ({"policies": ["fastest"]}, "policies.0", "first"),
        ({"availability": {"max_queue_ms": -1}}, "availability.max_queue_ms", "greater than"),
        ({"availability": {"shedding": "yes please"}}, "availability.shedding", "boolean"),
        ({"events": [{"at_s": 1, "until_s": 5, "partition": "mars"}]}, "events.0", "mars"),
        ({"events": [{"at_s": 5, "until_s": 1, "fail": "hub"}]}, "events.0.fail", "until_s"),
        ({"events": [{"at_s": 5}]}, "events.0", "one of: partition"),
        ({"sites": [{"name": "a", "slots": 1}, {"name": "a", "slots": 2}]}, "sites", "a"),
        ({"warmup_s": 50}, "warmup_s", "below duration_s"),
        ({"gateway_poll_interval_s": 0}, "gateway_poll_interval_s", "greater than 0"),
        ({"gateways": 2, "gateway_sites": ["hub"]}, "gateway_sites", "2 gateways"),
    ],
)
def test_errors_name_file_field_and_reason(
    data: dict[str, object], field: str, reason: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse_scenario(data, "s.yaml")
    err = info.value
    assert (err.file, err.field) == ("s.yaml", field)
    assert reason in err.reason
    assert str(err).startswith(f"s.yaml: {field}: ")
    assert "\n" not in str(err)


def test_bad_yaml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("sites: [\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml: line \d+: invalid YAML"):
        load_scenario(bad)
    with pytest.raises(ConfigError, match=r"nope\.yaml: \(file\): "):
        load_scenario(tmp_path / "nope.yaml")
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n")
    with pytest.raises(ConfigError, match=r"\(top level\): expected a mapping"):
        load_scenario(listy)


def test_cli_reports_a_malformed_scenario_on_one_line_with_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "s.yaml"
    bad.write_text("clients: 64\nsites:\n  - {name: hub, slots: -3}\n")
    result = CliRunner().invoke(app, ["sim", "run", str(bad)])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines == [f"error: {bad}: sites.0.slots: Input should be greater than 0 (got -3)"]
