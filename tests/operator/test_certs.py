"""`gridroute certs init`: files, SANs and key usages."""

from __future__ import annotations

from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from typer.testing import CliRunner

from gridroute.cli import app


def test_certs_init_writes_a_ca_and_per_site_certificates(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "certs",
            "init",
            "--sites",
            "hub,west",
            "--out",
            str(tmp_path),
            "--trust-domain",
            "t.example",
        ],
    )
    assert result.exit_code == 0, result.output
    ca = x509.load_pem_x509_certificate((tmp_path / "ca.crt").read_bytes())
    for site in ("hub", "west"):
        for kind, usage in (
            ("server", ExtendedKeyUsageOID.SERVER_AUTH),
            ("client", ExtendedKeyUsageOID.CLIENT_AUTH),
        ):
            cert = x509.load_pem_x509_certificate((tmp_path / site / f"{kind}.crt").read_bytes())
            cert.verify_directly_issued_by(ca)
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
            assert san.get_values_for_type(x509.UniformResourceIdentifier) == [
                f"spiffe://t.example/site/{site}"
            ]
            assert san.get_values_for_type(x509.DNSName) == ["localhost"]
            assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
            eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
            assert list(eku) == [usage]
        assert (tmp_path / site / "server.key").stat().st_mode & 0o077 == 0
