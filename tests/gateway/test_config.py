"""The config model: defaults, errors that name the field, schema and check verbs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gridroute.cli import app
from gridroute.config import ConfigError
from gridroute.core import Policy
from gridroute.gateway.config import GatewayConfig, load_config, parse_config
from gridroute.gateway.routing import build_routing
from gridroute.operator.certs import init_certs

ROOT = Path(__file__).resolve().parents[2]
MIN = "sites: [{name: a, backend_url: 'http://x:1'}]\nmodels: [{name: m}]\n"


def test_defaults_are_the_documented_ones() -> None:
    cfg = parse_config(MIN)
    assert cfg.operator is None
    assert cfg.timeouts.connect_timeout_s == 2.0
    assert cfg.timeouts.local_connect_timeout_s == 0.5
    assert cfg.limits.max_body_bytes == 10 * 1024 * 1024
    assert cfg.health.interval_s == 3.0 and cfg.health.rise == 2
    assert cfg.models[0].policy is Policy.GRIDROUTE and cfg.models[0].sites == "all"
    assert cfg.availability.shedding is False
    assert cfg.sites[0].provider_name == "a"
    for name, field in GatewayConfig.model_fields.items():
        assert (field.description and "Default" in field.description) or name in {"sites", "models"}


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (MIN + "workers: 0\n", "workers"),
        (MIN + "bogus: 1\n", "bogus"),
        (
            "sites: [{name: a, backend_url: 'ftp://x'}]\nmodels: [{name: m}]\n",
            "sites.0.backend_url",
        ),
        (MIN + "availability: {full_after_ms: -1}\n", "availability.full_after_ms"),
        (MIN + "local_site: z\n", "local_site"),
        (
            "sites: [{name: a, backend_url: 'http://x'}]\nmodels: [{name: m, sites: [q]}]\n",
            "models.0.sites",
        ),
        (MIN + "operator: {url: 'http://o', poll_interval_s: 0}\n", "operator.poll_interval_s"),
        (MIN + "fairness_key: cookie\n", "fairness_key"),
        (MIN + "fairness_key: 'header:'\n", "fairness_key"),
        (MIN + "availability: {fair_wait_ms: 0}\n", "availability.fair_wait_ms"),
        (MIN + "availability: {retry_after_min_s: 8}\n", "availability"),
    ],
)
def test_errors_name_the_field(text: str, where: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(text, "g.yaml")
    assert f"g.yaml: {where}" in str(err.value)


def test_routing_puts_the_local_site_first_and_skips_sites_serving_nothing() -> None:
    cfg = parse_config(
        "local_site: c\n"
        "sites: [{name: a, backend_url: 'http://a'}, {name: b, backend_url: 'http://b'},"
        " {name: c, provider: pool, backend_url: 'http://c'}]\n"
        "models: [{name: m, sites: [a, c]}, {name: n, sites: [c], policy: first}]\n"
    )
    routing = build_routing(cfg)
    assert [c.key for c in routing.candidates] == ["c/pool", "a/a"]
    assert routing.candidates[0].local and routing.candidates[0].models == {"m", "n"}
    assert routing.backends["c/pool"].connect_timeout_s == 0.5
    assert routing.backends["a/a"].connect_timeout_s == 2.0
    assert routing.policies == {"m": Policy.GRIDROUTE, "n": Policy.FIRST}


def test_cli_schema_and_check(tmp_path: Path) -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["config", "schema"])
    assert out.exit_code == 0
    schema = json.loads(out.stdout)
    assert "availability" in schema["properties"]
    # Every field of every section says what it is, the core's availability included.
    for where, section in [("", schema), *schema["$defs"].items()]:
        for name, prop in section.get("properties", {}).items():
            assert prop.get("description"), f"{where}.{name} has no description"
    assert "429" in schema["$defs"]["AvailabilitySettings"]["properties"]["shedding"]["description"]
    missing = runner.invoke(app, ["config", "check", str(ROOT / "examples" / "gateway.yaml")])
    # Run from a directory without out/certs: every named file is reported, exit 2.
    if not (Path.cwd() / "out" / "certs" / "ca.crt").exists():
        assert missing.exit_code == 2
        assert "operator.tls.ca_file: no such file: out/certs/ca.crt" in missing.output
    init_certs(tmp_path / "out" / "certs", ["hub", "west", "east"])
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path)
        good = runner.invoke(app, ["config", "check", str(ROOT / "examples" / "gateway.yaml")])
    assert good.exit_code == 0, good.output
    assert "gateway config" in good.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(MIN + "limits: {max_body_bytes: zero}\n")
    res = runner.invoke(app, ["config", "check", str(bad)])
    assert res.exit_code == 2
    assert "limits.max_body_bytes" in res.output


def test_every_example_gateway_config_is_valid() -> None:
    for path in sorted((ROOT / "examples").glob("gateway*.yaml")):
        load_config(path, files=False)
