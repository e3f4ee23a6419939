"""`gridroute certs init`: a CA and per-site server and client certificates.

For demos and tests. Each site gets `DIR/<site>/server.{crt,key}` (serverAuth) and
`DIR/<site>/client.{crt,key}` (clientAuth), both naming the site with the URI SAN
`spiffe://<trust-domain>/site/<site>` plus DNS `localhost` and IP `127.0.0.1`, so
`curl --cacert DIR/ca.crt https://127.0.0.1:PORT` verifies host names without `-k`.
`--host NAME` (repeatable: a DNS name or an IP address) adds SANs to the server
certificates, for operators reached by another name.
Keys are EC P-256: fast to make, so tests make fresh ones every run.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from gridroute.wire.identity import spiffe_id

VALID_DAYS = 365


@dataclass(frozen=True, slots=True)
class Authority:
    """A CA key and certificate that site certificates are signed with."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_ca(trust_domain: str, now: dt.datetime | None = None) -> Authority:
    """A self-signed CA for `trust_domain`."""
    now = now or dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(f"gridroute CA {trust_domain}"))
        .issuer_name(_name(f"gridroute CA {trust_domain}"))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Authority(key, cert)


def host_san(name: str) -> x509.GeneralName:
    """`name` as a SAN: an IP address when it parses as one, else a DNS name."""
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


LOCAL_HOSTS = ("localhost", "127.0.0.1")
"""Host names every leaf certificate carries, so loopback clients can verify them."""


def make_site_cert(
    ca: Authority,
    site: str,
    trust_domain: str,
    *,
    client: bool,
    hosts: tuple[str, ...] = (),
    now: dt.datetime | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A leaf certificate naming `site` (server or client use), valid for `LOCAL_HOSTS`
    plus `hosts`."""
    name = f"{site} {'client' if client else 'server'}"
    return make_leaf(ca, spiffe_id(trust_domain, site), name, client=client, hosts=hosts, now=now)


def make_leaf(
    ca: Authority,
    uri: str,
    common_name: str,
    *,
    client: bool,
    hosts: tuple[str, ...] = (),
    now: dt.datetime | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A leaf certificate with the URI SAN `uri` (the identity a verifier maps: a site's
    SPIFFE id, or a NATS user's), valid for `LOCAL_HOSTS` plus `hosts`."""
    now = now or dt.datetime.now(dt.UTC)
    names = list(dict.fromkeys((*LOCAL_HOSTS, *hosts)))
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=VALID_DAYS))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.UniformResourceIdentifier(uri), *(host_san(n) for n in names)]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return key, cert


def load_ca(out: Path) -> Authority:
    """The CA `init_certs` wrote to `out` (`ca.crt`, `ca.key`), to sign more leaves."""
    key = serialization.load_pem_private_key((out / "ca.key").read_bytes(), password=None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return Authority(key, x509.load_pem_x509_certificate((out / "ca.crt").read_bytes()))


def write_leaf(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
    """`path`.crt and `path`.key (the key mode 0600), PEM."""
    path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path = path.with_suffix(".key")
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)


def init_certs(
    out: Path, sites: list[str], trust_domain: str = "gridroute.local", hosts: tuple[str, ...] = ()
) -> Authority:
    """Write `out/ca.{crt,key}` and `out/<site>/{server,client}.{crt,key}` for every site;
    the server certificates also name `hosts`."""
    out.mkdir(parents=True, exist_ok=True)
    ca = make_ca(trust_domain)
    write_leaf(out / "ca", ca.key, ca.cert)
    for site in sites:
        (out / site).mkdir(exist_ok=True)
        for client in (False, True):
            extra = () if client else hosts
            key, cert = make_site_cert(ca, site, trust_domain, client=client, hosts=extra)
            write_leaf(out / site / ("client" if client else "server"), key, cert)
    return ca
