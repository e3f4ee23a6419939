"""A gateway or operator that cannot use its config says so in one line per problem,
naming the file, the field and the path, and exits 2: real processes, started from
another directory than the one their relative certificate paths assume."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gridroute.operator.certs import init_certs

pytestmark = pytest.mark.e2e

GATEWAY = """\
listen: 127.0.0.1:0
operator:
  url: https://127.0.0.1:9
  tls: {ca_file: CA, cert_file: CERT, key_file: KEY}
sites: [{name: a, backend_url: 'http://127.0.0.1:9'}]
models: [{name: m}]
health: {enabled: false}
"""
OPERATOR = """\
site: hub
listen: 127.0.0.1:0
tls: {cert: CERT, key: KEY, ca: CA}
"""
GOOD = {
    "gateway": {
        "CA": "certs/ca.crt",
        "CERT": "certs/hub/client.crt",
        "KEY": "certs/hub/client.key",
    },
    "operator": {
        "CA": "certs/ca.crt",
        "CERT": "certs/hub/server.crt",
        "KEY": "certs/hub/server.key",
    },
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site directory: certs/ made by `certs init`, a garbage file, configs written by
    each test; the processes run from its sibling `elsewhere/`."""
    root = tmp_path_factory.mktemp("wrongdir")
    init_certs(root / "site" / "certs", ["hub", "west"])
    (root / "site" / "certs" / "garbage.pem").write_text("not PEM\n")
    (root / "elsewhere").mkdir()
    return root / "site"


def _start(
    site: Path, kind: str, cwd: Path, extra: str = "", **files: str
) -> tuple[int, str, str, Path]:
    text = GATEWAY if kind == "gateway" else OPERATOR
    for name, path in {**GOOD[kind], **files}.items():
        text = text.replace(name, path)
    config = site / f"{kind}-{len(list(site.glob('*.yaml')))}.yaml"
    config.write_text(text + extra)
    proc = subprocess.run(
        [sys.executable, "-m", "gridroute.cli", kind, "--config", str(config)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return proc.returncode, proc.stdout, proc.stderr, config


@pytest.mark.parametrize("kind", ["gateway", "operator"])
def test_started_from_the_wrong_directory(site: Path, kind: str) -> None:
    elsewhere = site.parent / "elsewhere"
    code, out, err, config = _start(site, kind, elsewhere)
    assert code == 2, err
    assert "Traceback" not in err and out == ""
    lines = err.strip().splitlines()
    fields = {
        "gateway": ["operator.tls.ca_file", "operator.tls.cert_file", "operator.tls.key_file"],
        "operator": ["tls.cert", "tls.key", "tls.ca"],
    }[kind]
    assert len(lines) == len(fields), err
    for line in lines:
        assert line.startswith(f"{config}: ")
        assert f"(relative to the working directory {elsewhere})" in line
    assert sorted(line.split(": ")[1] for line in lines) == sorted(fields)
    assert any("no such file: certs/ca.crt" in line for line in lines)


@pytest.mark.parametrize(
    ("kind", "files", "field", "says"),
    [
        ("gateway", {"CA": "certs/garbage.pem"}, "operator.tls.ca_file", "not a PEM CA bundle"),
        ("gateway", {"KEY": "certs/west/client.key"}, "operator.tls.key_file", "not the key of"),
        ("operator", {"CERT": "certs/garbage.pem"}, "tls.cert", "not a PEM certificate"),
        ("operator", {"KEY": "certs/garbage.pem"}, "tls.key", "not a PEM private key"),
    ],
)
def test_a_file_that_is_not_what_its_field_says(
    site: Path, kind: str, files: dict[str, str], field: str, says: str
) -> None:
    code, out, err, config = _start(site, kind, site, **files)
    assert code == 2, err
    assert "Traceback" not in err and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"{config}: {field}: {says}"), lines[0]


def test_an_out_of_range_listen_port_is_refused(site: Path) -> None:
    code, _, err, config = _start(
        site, "gateway", site, extra="metrics: {listen: '127.0.0.1:808080'}\n"
    )
    assert code == 2
    assert err.startswith(f"{config}: metrics.listen: the port must be 0-65535")
    assert err.count("\n") == 1
