"""The shared config pieces: the one `host:port` validator every listen field uses."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gridroute.cli import app
from gridroute.config import ConfigError, check_files, split_listen
from gridroute.gateway.config import parse_config
from gridroute.operator.config import parse_config as parse_operator

GATEWAY = "sites: [{name: a, backend_url: 'http://x:1'}]\nmodels: [{name: m}]\n"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:8080", ("127.0.0.1", 8080)),
        ("0.0.0.0:0", ("0.0.0.0", 0)),
        ("localhost:65535", ("localhost", 65535)),
        ("gw-1.example.internal:1", ("gw-1.example.internal", 1)),
        ("[::1]:8080", ("::1", 8080)),
        ("[::]:9443", ("::", 9443)),
    ],
)
def test_good_listen_addresses_split(value: str, expected: tuple[str, int]) -> None:
    assert split_listen(value) == expected


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("127.0.0.1:808080", "0-65535"),
        ("127.0.0.1:65536", "0-65535"),
        ("127.0.0.1:-1", "must be a number"),
        ("127.0.0.1:", "must be a number"),
        ("127.0.0.1:http", "must be a number"),
        ("127.0.0.1", "must be host:port"),
        (":8080", "host is empty"),
        ("::1:8080", "in brackets"),
        ("[::1:8080", "unclosed ["),
        ("[nope]:8080", "not an IPv6 address"),
        ("a host:8080", "not a host name"),
    ],
)
def test_bad_listen_addresses_say_what_is_wrong(value: str, says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("[", r"\[")):
        split_listen(value)


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ("listen: 127.0.0.1:808080\n", "listen"),
        ("listen: '::1:8080'\n", "listen"),
        ("listen: ':8080'\n", "listen"),
        ("metrics: {listen: '127.0.0.1:99999'}\n", "metrics.listen"),
        ("metrics: {listen: 'localhost'}\n", "metrics.listen"),
        ("workers: 4\nmetrics: {listen: '127.0.0.1:65534'}\n", "metrics.listen"),
    ],
)
def test_every_gateway_listen_field_is_validated(extra: str, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(GATEWAY + extra, "g.yaml")
    assert err.value.field == field, str(err.value)
    assert len(str(err.value).splitlines()) == 1


def test_gateway_listen_accepts_ipv6_and_port_zero() -> None:
    cfg = parse_config(GATEWAY + "listen: '[::1]:0'\nmetrics: {listen: '127.0.0.1:0'}\n")
    assert cfg.listen == "[::1]:0"


@pytest.mark.parametrize("listen", ["127.0.0.1:808080", "0.0.0.0", "[::1]x:1", ":9443"])
def test_operator_listen_is_validated(listen: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_operator({"site": "west", "listen": listen}, "o.yaml")
    assert err.value.field == "listen", str(err.value)


def test_operator_host_and_port_come_from_the_same_parser() -> None:
    cfg = parse_operator({"site": "west", "listen": "[::1]:9443"}, "o.yaml")
    assert (cfg.host, cfg.port) == ("::1", 9443)


def test_config_check_refuses_an_out_of_range_port(tmp_path: Path) -> None:
    """The reported case: `listen: 127.0.0.1:808080` passed and bound port 21648."""
    path = tmp_path / "gw.yaml"
    path.write_text(GATEWAY + "listen: 127.0.0.1:808080\n")
    res = CliRunner().invoke(app, ["config", "check", str(path)])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1, res.output
    assert lines[0].startswith(f"{path}: listen: the port must be 0-65535")
    assert "808080" in lines[0]


def test_missing_relative_file_names_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        check_files("g.yaml", {"tls.ca_file": "certs/ca.crt", "tls.key_file": "/nope/key.pem"})
    lines = str(err.value).splitlines()
    assert lines == [
        f"g.yaml: tls.ca_file: no such file: certs/ca.crt (relative to the working directory "
        f"{tmp_path})",
        "g.yaml: tls.key_file: no such file: /nope/key.pem",
    ]
