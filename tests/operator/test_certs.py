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


def _handshake(certs: Path, site: str, server_hostname: str) -> None:
    """One TLS handshake on loopback: a server with `site`'s server certificate, a client
    that trusts only `certs/ca.crt` and verifies `server_hostname` (what `curl --cacert`
    does). Raises `ssl.SSLCertVerificationError` when the name is not in the SANs."""
    import contextlib
    import socket
    import ssl
    import threading

    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(certs / site / "server.crt", certs / site / "server.key")
    client_ctx = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    assert client_ctx.check_hostname and client_ctx.verify_mode is ssl.CERT_REQUIRED
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def serve() -> None:
            conn, _ = listener.accept()
            with (
                conn,
                contextlib.suppress(ssl.SSLError),  # the client refused the certificate
                server_ctx.wrap_socket(conn, server_side=True) as tls,
            ):
                tls.recv(1)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        try:
            with (
                socket.create_connection(listener.getsockname()) as raw,
                client_ctx.wrap_socket(raw, server_hostname=server_hostname) as tls,
            ):
                tls.sendall(b"x")
        finally:
            thread.join(timeout=5)


def test_server_certificates_verify_for_loopback_names_and_extra_hosts(tmp_path: Path) -> None:
    import ssl

    import pytest

    result = CliRunner().invoke(
        app,
        ["certs", "init", "--sites", "hub", "--out", str(tmp_path),
         "--host", "operator.hub.example", "--host", "10.1.2.3"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for name in ("127.0.0.1", "localhost", "operator.hub.example", "10.1.2.3"):
        _handshake(tmp_path, "hub", name)
    with pytest.raises(ssl.SSLCertVerificationError, match=r"operator\.west\.example"):
        _handshake(tmp_path, "hub", "operator.west.example")
    client = x509.load_pem_x509_certificate((tmp_path / "hub" / "client.crt").read_bytes())
    san = client.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]  # --host: server certs only
