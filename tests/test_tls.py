"""`gridroute.tls`: a TLS file that is not what its field says is one line naming it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from gridroute.config import ConfigError
from gridroute.operator.certs import init_certs
from gridroute.tls import Pem, TLSFiles, check, load_context


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tls") / "certs"
    init_certs(out, ["hub", "west"])
    (out / "garbage.pem").write_text("not PEM at all\n")
    key = serialization.load_pem_private_key((out / "hub" / "client.key").read_bytes(), None)
    locked = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    (out / "locked.key").write_bytes(locked)
    return out


def _files(
    certs: Path, ca: str = "ca.crt", cert: str = "hub/client.crt", key: str = "hub/client.key"
) -> TLSFiles:
    return TLSFiles(
        Pem("tls.ca_file", certs / ca),
        Pem("tls.cert_file", certs / cert),
        Pem("tls.key_file", certs / key),
    )


def test_good_files_load(certs: Path) -> None:
    ctx = load_context(_files(certs), "g.yaml")
    assert ctx.cert_store_stats()["x509_ca"] == 1


@pytest.mark.parametrize(
    ("files", "field", "says"),
    [
        ({"ca": "garbage.pem"}, "tls.ca_file", "not a PEM CA bundle"),
        ({"ca": "hub/client.key"}, "tls.ca_file", "not a PEM CA bundle"),
        ({"cert": "garbage.pem"}, "tls.cert_file", "not a PEM certificate"),
        ({"key": "garbage.pem"}, "tls.key_file", "not a PEM private key"),
        ({"key": "west/client.key"}, "tls.key_file", "not the key of the certificate"),
        ({"key": "locked.key"}, "tls.key_file", "an encrypted private key"),
    ],
)
def test_a_bad_file_names_its_field(
    certs: Path, files: dict[str, str], field: str, says: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_context(_files(certs, **files), "g.yaml")
    lines = str(err.value).splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"g.yaml: {field}: {says}"), lines[0]


def test_check_reports_every_block(certs: Path, tmp_path: Path) -> None:
    shutil.copy(certs / "garbage.pem", tmp_path / "x.pem")
    blocks = [
        _files(certs, cert="garbage.pem"),
        TLSFiles(Pem("sites.1.tls.ca_file", tmp_path / "x.pem")),
        _files(certs),
    ]
    with pytest.raises(ConfigError) as err:
        check("g.yaml", blocks)
    assert [p.field for p in err.value.problems] == ["tls.cert_file", "sites.1.tls.ca_file"]


def test_config_loaders_check_every_tls_block_nats_included(certs: Path, tmp_path: Path) -> None:
    from gridroute.gateway.config import load_config as load_gateway
    from gridroute.operator.config import load_config as load_operator

    nats = (
        "signals: {transport: nats, nats: {servers: ['tls://127.0.0.1:4222'],"
        f" tls: {{caFile: {certs / 'garbage.pem'}}}}}}}\n"
    )
    gw = tmp_path / "gw.yaml"
    gw.write_text(
        "sites: [{name: a, backend_url: 'https://127.0.0.1:9',"
        f" tls: {{ca_file: {certs / 'ca.crt'}, cert_file: {certs / 'garbage.pem'},"
        f" key_file: {certs / 'hub/client.key'}}}}}]\nmodels: [{{name: m}}]\n" + nats
    )
    with pytest.raises(ConfigError) as err:
        load_gateway(gw)
    assert [p.field for p in err.value.problems] == [
        "sites.0.tls.cert_file",
        "signals.nats.tls.caFile",
    ]
    op = tmp_path / "op.yaml"
    op.write_text("site: hub\n" + nats)
    with pytest.raises(ConfigError) as err:
        load_operator(op)
    assert [p.field for p in err.value.problems] == ["signals.nats.tls.caFile"]
