"""Who may read an operator: our trust domain only, and the allow-list where set.

Real TLS on loopback with certificates made at test time; one CA signs for two trust
domains, as a shared corporate CA would."""

from __future__ import annotations

import asyncio
import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gridroute.operator.certs import init_certs, make_site_cert, write_leaf
from gridroute.operator.config import TLSFiles, client_files, parse_config
from gridroute.operator.peer_access import PeerVerdict, judge
from gridroute.operator.service import Operator
from gridroute.relay.poller import client_ssl_context


def test_judge_reads_the_uri_sans() -> None:
    ours = "spiffe://gridroute.local/site/west"
    assert judge([ours], "gridroute.local", None) is PeerVerdict.OK
    assert judge([], "gridroute.local", None) is PeerVerdict.NO_IDENTITY
    assert judge(["https://x"], "gridroute.local", None) is PeerVerdict.NO_IDENTITY
    other = "spiffe://evil.example/site/west"
    assert judge([other], "gridroute.local", None) is PeerVerdict.FOREIGN_TRUST_DOMAIN
    # a prefix is not a trust domain
    tricky = "spiffe://gridroute.local.evil/site/west"
    assert judge([tricky], "gridroute.local", None) is PeerVerdict.FOREIGN_TRUST_DOMAIN
    assert judge([ours], "gridroute.local", frozenset({ours})) is PeerVerdict.OK
    hub = frozenset({"spiffe://gridroute.local/site/hub"})
    assert judge([ours], "gridroute.local", hub) is PeerVerdict.NOT_ALLOWED


@pytest.fixture()
def pki(tmp_path: Path) -> Path:
    ca = init_certs(tmp_path, ["hub", "west"])
    (tmp_path / "foreign").mkdir()
    key, cert = make_site_cert(ca, "west", "evil.example", client=True)
    write_leaf(tmp_path / "foreign" / "client", key, cert)
    return tmp_path


def _tls(root: Path, site: str) -> TLSFiles:
    return TLSFiles(
        cert=root / site / "server.crt", key=root / site / "server.key", ca=root / "ca.crt"
    )


def _get(port: int, ctx: ssl.SSLContext, path: str = "/signals") -> tuple[int, object]:
    try:
        with urllib.request.urlopen(f"https://127.0.0.1:{port}{path}", context=ctx) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def _client(root: Path, who: str) -> ssl.SSLContext:
    t = TLSFiles(cert=root / who / "client.crt", key=root / who / "client.key", ca=root / "ca.crt")
    return client_ssl_context(client_files(t))


def _run(root: Path, allowed: list[str] | None, checks: list[tuple[str, int]]) -> Operator:
    data: dict[str, object] = {
        "site": "hub",
        "listen": "127.0.0.1:0",
        "tls": _tls(root, "hub").model_dump(),
        "scrapeIntervalSeconds": 5,
        "peerPollIntervalSeconds": 5,
    }
    if allowed is not None:
        data["allowedIdentities"] = allowed
    op = Operator(parse_config(data))

    async def scenario() -> None:
        await op.start()
        try:
            assert op.port is not None
            port = op.port
            for who, want in checks:
                status, body = await asyncio.to_thread(_get, port, _client(root, who))
                assert status == want, (who, body)
                if status == 403:
                    assert isinstance(body, dict) and body["error"]["code"] == "forbidden"
            status, _ = await asyncio.to_thread(_get, port, _client(root, "foreign"), "/healthz")
            assert status == 200
        finally:
            await op.stop()

    asyncio.run(scenario())
    return op


def _refused(op: Operator, reason: str) -> float:
    value = op.metrics.registry.get_sample_value(
        "grid_signals_peer_refused_total", {"reason": reason}
    )
    return value or 0.0


def test_a_certificate_of_another_trust_domain_is_refused_and_counted(pki: Path) -> None:
    op = _run(pki, None, [("west", 200), ("foreign", 403), ("foreign", 403)])
    assert _refused(op, "foreign_trust_domain") == 2


def test_the_allow_list_admits_only_its_identities(pki: Path) -> None:
    allowed = ["spiffe://gridroute.local/site/hub"]
    op = _run(pki, allowed, [("hub", 200), ("west", 403), ("foreign", 403)])
    assert _refused(op, "not_allowed") == 1
    assert _refused(op, "foreign_trust_domain") == 1
