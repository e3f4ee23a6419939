"""`gridroute config check` recognises each kind of file and names every problem."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gridroute.cli import app
from gridroute.operator.certs import init_certs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def check(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["config", "check", *args])
    return res.exit_code, res.output


@pytest.fixture
def in_certs_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A working directory holding out/certs, as after `gridroute certs init`."""
    init_certs(tmp_path / "out" / "certs", ["hub", "west", "east"])
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_each_kind_is_recognised(in_certs_dir: Path) -> None:
    code, out = check(str(EXAMPLES / "gateway.yaml"))
    assert code == 0 and "gateway config" in out, out
    code, out = check(str(EXAMPLES / "operator-west.yaml"))
    assert code == 0 and "operator config, site west" in out, out
    code, out = check(str(EXAMPLES / "scenarios" / "seed-partition.yaml"))
    assert code == 0 and "scenario" in out, out


def test_an_operator_file_gets_operator_errors_not_gateway_ones(tmp_path: Path) -> None:
    bad = tmp_path / "op.yaml"
    bad.write_text(
        "site: hub\nlisten: 127.0.0.1:9443\ntrustDomain: gridroute.local\n"
        "providers: [{name: p, models: [m], backendUrl: 'http://x', maxRunning: -1}]\n"
    )
    code, out = check(str(bad))
    assert code == 2
    lines = out.strip().splitlines()
    assert lines == [f"{bad}: providers.0.maxRunning: Input should be greater than 0 (got -1)"]


def test_every_missing_file_is_named_with_its_field(tmp_path: Path) -> None:
    # Run from a directory without out/certs, as a user started in the wrong place.
    code, out = check(str(EXAMPLES / "operator-hub.yaml"))
    assert code == 2
    assert "tls.cert: no such file: out/certs/hub/server.crt" in out
    assert "tls.ca: no such file: out/certs/ca.crt" in out
    assert "Traceback" not in out


def test_unknown_files_and_kinds_are_refused(tmp_path: Path) -> None:
    odd = tmp_path / "odd.yaml"
    odd.write_text("colour: blue\n")
    code, out = check(str(odd))
    assert code == 2 and "pass --kind" in out
    code, out = check(str(odd), "--kind", "nonsense")
    assert code == 2 and "--kind: one of gateway, operator, scenario" in out
    code, out = check(str(tmp_path / "absent.yaml"))
    assert code == 2 and "no such file" in out
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n")
    code, out = check(str(listy))
    assert code == 2 and "(top level): expected a mapping" in out


def test_forced_kind_validates_as_that_kind(tmp_path: Path) -> None:
    sc = tmp_path / "s.yaml"
    sc.write_text("clients: 64\n")
    code, out = check(str(sc), "--kind", "gateway")
    assert code == 2 and "sites: Field required" in out


def test_schema_of_every_kind() -> None:
    for kind in ("gateway", "operator", "scenario", "control", "overlay"):
        res = CliRunner().invoke(app, ["config", "schema", kind])
        assert res.exit_code == 0 and '"properties"' in res.output


def test_an_overlay_file_is_recognised_and_its_errors_name_the_field(tmp_path: Path) -> None:
    good = tmp_path / "overlay.json"
    good.write_text(
        '{"revision": 3, "models": [{"model": "m", "selection_policy": {"picker": "weighted"},'
        ' "candidates": [{"site": "a", "provider": "a", "selection_group": 0,'
        ' "traffic_weight": 2}, {"site": "b", "provider": "b", "selection_group": 1}]}]}'
    )
    code, out = check(str(good))
    assert code == 0, out
    assert out.startswith(f"{good}: ok (routing overlay, revision 3, digest ")
    assert "m: picker weighted, 2 groups" in out
    gapped = tmp_path / "gapped.yaml"
    gapped.write_text(
        "models:\n  - model: m\n    candidates:\n"
        "      - {site: a, provider: a, selection_group: 0}\n"
        "      - {site: b, provider: b, selection_group: 2}\n"
    )
    code, out = check(str(gapped))
    assert code == 2
    assert out.strip() == (
        f"{gapped}: models.0.candidates.1.selection_group: capability 'm', group 2: "
        "selection_group must be contiguous and monotonic (after 0)"
    )
    typo = tmp_path / "typo.yaml"
    typo.write_text("revison: 2\nmodels: [{model: m, selection_policy: {picker: fancy}}]\n")
    code, out = check(str(typo))
    assert code == 2
    assert f"{typo}: revison: Extra inputs are not permitted" in out  # still an overlay
    assert f"{typo}: models.0.selection_policy.picker: Input should be" in out
    # A gateway config's `models` (entries with `name`) is still a gateway config.
    gw = tmp_path / "gw.yaml"
    gw.write_text("models: [{name: m}]\n")
    code, out = check(str(gw))
    assert code == 2 and "sites: Field required" in out


def test_the_overlay_schema_is_the_published_one() -> None:
    res = CliRunner().invoke(app, ["config", "schema", "overlay"])
    assert res.exit_code == 0
    published = (Path(__file__).resolve().parents[2] / "docs" / "overlay.schema.json").read_text()
    assert json.loads(res.output) == json.loads(published)
