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


# `--offline`: a config written for another machine (docs/config.md, "Checking a file").

NOT_CHECKED = {
    "groups/drain.input.yaml": "an input of `gridroute overlay render`, not a config",
    "groups/round-robin.input.yaml": "an input of `gridroute overlay render`, not a config",
}


NOT_CHECKED_UNDER = {
    "kubernetes": "Helm values and Kubernetes manifests; the gridroute configs they hold "
    "are rendered and checked by tests/deploy/test_chart.py",
}


def _example_configs() -> list[Path]:
    found = sorted(p for p in EXAMPLES.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))
    return [
        p
        for p in found
        if str(p.relative_to(EXAMPLES)) not in NOT_CHECKED
        and p.relative_to(EXAMPLES).parts[0] not in NOT_CHECKED_UNDER
    ]


def test_the_examples_left_out_exist() -> None:
    for name in NOT_CHECKED:
        assert (EXAMPLES / name).is_file(), name  # an entry that names nothing must go
    for name in NOT_CHECKED_UNDER:
        assert (EXAMPLES / name).is_dir(), name


@pytest.mark.parametrize("config", _example_configs(), ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_every_example_config_checks_offline(
    config: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # From an empty directory: out/certs and /etc/gridroute/certs are not there.
    monkeypatch.chdir(tmp_path)
    code, out = check("--offline", str(config))
    assert code == 0, out
    assert out.startswith(f"{config}: ok ("), out


def test_offline_names_the_fields_it_did_not_open(tmp_path: Path) -> None:
    code, out = check("--offline", str(EXAMPLES / "grid" / "gateway-hub.yaml"))
    assert code == 0, out
    assert out.rstrip().endswith(
        "; offline, not opened: operator.tls.ca_file, operator.tls.cert_file, "
        "operator.tls.key_file)"
    ), out
    code, out = check("--offline", str(EXAMPLES / "grid" / "operator-east.yaml"))
    assert code == 0, out
    assert "not opened: tls.cert, tls.key, tls.ca, tls.clientCert, tls.clientKey)" in out


def test_the_default_still_opens_every_file() -> None:
    code, out = check(str(EXAMPLES / "grid" / "gateway-hub.yaml"))
    assert code == 2
    gw = EXAMPLES / "grid" / "gateway-hub.yaml"
    assert f"{gw}: operator.tls.ca_file: no such file: /etc/gridroute/certs/ca.crt" in out
    assert "operator.tls.key_file: no such file: /etc/gridroute/certs/hub/client.key" in out
    code, out = check(str(EXAMPLES / "grid" / "operator-east.yaml"))
    assert code == 2
    assert "tls.cert: no such file: /etc/gridroute/certs/east/server.crt" in out


GATEWAY = """
sites: [{name: a, backend_url: "http://127.0.0.1:1"}]
models: [{name: m}]
"""


def test_offline_opens_no_file(tmp_path: Path) -> None:
    # A directory where a file belongs: only opening it can tell.
    (tmp_path / "keys").mkdir()
    gw = tmp_path / "gw.yaml"
    gw.write_text(GATEWAY + f"auth: {{api_keys_file: {tmp_path / 'keys'}}}\n")
    code, out = check(str(gw))
    assert code == 2 and f"{gw}: auth.api_keys_file: is a directory, not a file" in out, out
    code, out = check("--offline", str(gw))
    assert code == 0 and "not opened: auth.api_keys_file)" in out, out


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ('""', "not a file path: empty (got '')"),
        ("certs/", "names a directory, not a file (got 'certs/')"),
        ('"ca\\0.crt"', "not a file path: a control character (got 'ca\\x00.crt')"),
    ],
)
def test_offline_still_checks_each_path_and_every_value(
    tmp_path: Path, value: str, reason: str
) -> None:
    gw = tmp_path / "gw.yaml"
    gw.write_text(
        GATEWAY + "operator:\n  url: https://127.0.0.1:9443\n  poll_interval_s: 1\n"
        f"  tls: {{ca_file: {value}, cert_file: /etc/c.crt, key_file: /etc/c.key}}\n"
    )
    code, out = check("--offline", str(gw))
    assert code == 2
    assert out.strip() == f"{gw}: operator.tls.ca_file: {reason}"
    gw.write_text(GATEWAY + "operator: {url: http://x, poll_interval_s: -1}\n")
    code, out = check("--offline", str(gw))
    assert code == 2
    assert out.strip() == (
        f"{gw}: operator.poll_interval_s: Input should be greater than 0 (got -1)"
    )


def test_a_nul_byte_in_a_path_is_named_not_a_traceback(tmp_path: Path) -> None:
    gw = tmp_path / "gw.yaml"
    gw.write_text(GATEWAY + 'auth: {api_keys_file: "keys\\0"}\n')
    code, out = check(str(gw))
    assert code == 2
    assert out.strip() == f"{gw}: auth.api_keys_file: not a file path (got 'keys\\x00')"


def test_an_operator_token_file_is_not_opened_offline(tmp_path: Path) -> None:
    op = tmp_path / "op.yaml"
    op.write_text(
        "site: hub\nproviders:\n  - name: p\n    models: [m]\n    backendUrl: http://x\n"
        "    metricsConfig: {endpoint: http://x/metrics, bearerTokenFile: /etc/token}\n"
    )
    code, out = check(str(op))
    assert code == 2
    assert f"{op}: providers.0.metricsConfig.bearerTokenFile: no such file: /etc/token" in out
    code, out = check("--offline", str(op))
    assert code == 0 and "not opened: providers.0.metricsConfig.bearerTokenFile)" in out, out


def test_a_scenario_overlay_file_is_not_opened_offline(tmp_path: Path) -> None:
    sc = tmp_path / "s.yaml"
    sc.write_text("clients: 64\noverlay: absent.json\n")
    code, out = check(str(sc))
    assert code == 2 and f"{tmp_path / 'absent.json'}: overlay: no such file" in out, out
    code, out = check("--offline", str(sc))
    assert code == 0 and "not opened: overlay)" in out, out
    sc.write_text('clients: 64\noverlay: ""\n')
    code, out = check("--offline", str(sc))
    assert code == 2 and f"{sc}: overlay: not a file path: empty (got '')" in out, out


def test_a_control_file_names_its_client_certificate_and_gateway_files(tmp_path: Path) -> None:
    control = tmp_path / "control.yaml"
    control.write_text(
        "operatorTLS: {ca: certs/ca.crt, cert: certs/c.crt, key: certs/c.key}\n"
        "publish:\n  backendType: EndpointSlice\n"
        "  workloadGateways: {cluster-a: {file: gateways/a.yaml}}\n"
    )
    code, out = check(str(control))
    assert code == 2
    assert f"{control}: operatorTLS.ca: no such file: {tmp_path / 'certs/ca.crt'}" in out
    assert f"{control}: operatorTLS.key: no such file: {tmp_path / 'certs/c.key'}" in out
    assert (
        f"{control}: publish.workloadGateways.cluster-a.file: no such file: "
        f"{tmp_path / 'gateways/a.yaml'}"
    ) in out
    code, out = check("--offline", str(control))
    assert code == 0, out
    assert out.rstrip().endswith(
        "not opened: operatorTLS.ca, operatorTLS.cert, operatorTLS.key, "
        "publish.workloadGateways.cluster-a.file)"
    ), out
    # With the files there, the default loads the client certificate too.
    init_certs(tmp_path / "certs", ["hub"])
    (tmp_path / "gateways").mkdir()
    (tmp_path / "gateways" / "a.yaml").write_text("kind: Gateway\n")
    control.write_text(
        "operatorTLS: {ca: certs/ca.crt, cert: certs/hub/client.crt, key: certs/ca.crt}\n"
    )
    code, out = check(str(control))
    assert code == 2 and f"{control}: operatorTLS.key: not a PEM private key" in out, out
    control.write_text(
        "operatorTLS: {ca: certs/ca.crt, cert: certs/hub/client.crt, key: certs/hub/client.key}\n"
    )
    code, out = check(str(control))
    assert code == 0, out


def test_the_help_names_the_offline_flag() -> None:
    res = CliRunner().invoke(app, ["config", "check", "--help"])
    assert res.exit_code == 0 and "--offline" in res.output
    assert "open none of the files it names" in " ".join(res.output.split())


def test_a_bad_prefix_tokenizer_is_refused_naming_the_field(tmp_path: Path) -> None:
    """`prefix_affinity.tokenizer` names a vocabulary of the optional splintr-rs: an
    unknown name (with the package) or any name (without it) is an error on that field."""
    bad = tmp_path / "gw.yaml"
    bad.write_text(
        "sites: [{name: a, backend_url: 'http://127.0.0.1:1'}]\nmodels: [{name: m}]\n"
        "prefix_affinity: {tokenizer: no-such-vocabulary}\n"
    )
    code, out = check(str(bad))
    assert code == 2, out
    assert out.startswith(f"{bad}: prefix_affinity.tokenizer: "), out
    assert "unknown tokenizer 'no-such-vocabulary'" in out or "splintr-rs" in out
    assert "Traceback" not in out
