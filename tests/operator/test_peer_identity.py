"""Peers that cannot prove who they are: an expired certificate, plain HTTP where mutual
TLS is required. Each is refused, the refusal is counted under its own label (and
logged), and the last good readings of that peer keep serving.

Real operators over real TLS on loopback; certificates made at test time, the expired
ones signed by the grid's own CA (so only their dates are wrong)."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from operator_fixtures import (
    Certs,
    MetricsServer,
    free_port,
    operator_config,
    read_local,
    vllm_page,
    vllm_provider,
)

from gridroute.inbound.tls_gate import HandshakeRefusal, refusal_of
from gridroute.operator.certs import VALID_DAYS, init_certs, make_site_cert, write_leaf
from gridroute.operator.service import Operator
from gridroute.relay.poller import PollResult


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """hub and west under one CA, and `expired/west`: west's certificates, long expired."""
    root = tmp_path_factory.mktemp("pki")
    ca = init_certs(root, ["hub", "west"])
    expired = root / "expired"
    (expired / "west").mkdir(parents=True)
    then = dt.datetime.now(dt.UTC) - dt.timedelta(days=VALID_DAYS + 30)
    for client in (False, True):
        key, cert = make_site_cert(ca, "west", "gridroute.local", client=client, now=then)
        write_leaf(expired / "west" / ("client" if client else "server"), key, cert)
    return Certs(root, expired)


def _value(op: Operator, name: str, **labels: str) -> float:
    return op.metrics.registry.get_sample_value(name, labels) or 0.0


async def _until(check: object, what: str, rounds: int = 600) -> None:
    for _ in range(rounds):
        if check():  # type: ignore[operator]
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never happened: {what}")


async def _hub_relay(certs: Certs, port: int) -> dict[str, float]:
    """What a gateway at hub reads from its operator now: running per site."""
    outcome = await read_local(certs, port)
    assert outcome.result is PollResult.OK and outcome.decoded is not None
    return {s.site: s.running for s in outcome.decoded.samples}


def _west(pki: Certs, port: int, hub_port: int, metrics_port: int, tls_root: Path | None):
    cfg = operator_config(
        "west",
        port,
        certs=pki,
        peers={"hub": hub_port},
        providers=[vllm_provider("pool", metrics_port)],
    )
    if tls_root is not None:
        cfg = cfg.model_copy(update={"tls": pki.tls("west", tls_root)})
    return Operator(cfg)


def test_an_expired_peer_certificate_is_refused_both_ways_and_the_last_readings_serve(
    pki: Certs, caplog: pytest.LogCaptureFixture
) -> None:
    """west's certificates expire (it restarts with them on the same port): hub's polls
    of west fail as `bad_identity`, west's polls of hub are refused at the handshake as
    `expired_certificate` (counted and logged at hub), and hub keeps relaying west's
    last good reading, never anything from the expired peer."""
    caplog.set_level(logging.WARNING)

    async def main() -> None:
        hub_port, west_port = free_port(), free_port()
        hub = Operator(operator_config("hub", hub_port, certs=pki, peers={"west": west_port}))
        async with MetricsServer(vllm_page(5.0)) as metrics:
            west = _west(pki, west_port, hub_port, metrics.port, None)
            await hub.start()
            await west.start()
            try:
                await _until(lambda: "west/pool" in hub.store.latest(), "hub heard west")
                good = hub.store.latest()["west/pool"]
                await west.stop()
                metrics.text = vllm_page(9.0)  # what the expired west would report
                west = _west(pki, west_port, hub_port, metrics.port, pki.foreign)
                await west.start()
                await _until(
                    lambda: (
                        _value(hub, "grid_signals_poll_total", target="west", result="bad_identity")
                        >= 2
                    ),
                    "hub refused west's expired server certificate",
                )
                await _until(
                    lambda: (
                        _value(hub, "grid_signals_peer_refused_total", reason="expired_certificate")
                        >= 1
                    ),
                    "hub's listener refused west's expired client certificate",
                )
                assert _value(west, "grid_signals_poll_total", target="hub", result="ok") == 0
                assert hub.store.latest()["west/pool"] == good  # nothing new from west
                relay = await _hub_relay(pki, hub_port)
                assert relay["west"] == 5.0  # the last good reading keeps serving
            finally:
                await west.stop()
                await hub.stop()
        assert _value(hub, "grid_signals_client_errors_total", kind="tls_handshake") >= 1

    asyncio.run(main())
    logged = [r.getMessage() for r in caplog.records if "tls_handshake" in r.getMessage()]
    assert logged and "expired_certificate" in logged[0]


def test_plain_http_to_the_mtls_port_is_refused_and_counted(pki: Certs) -> None:
    """A client speaking plain HTTP to the operator's TLS port gets no answer of ours
    (the connection is closed), is counted `plain_http`, and TLS clients still read."""

    async def main() -> None:
        port = free_port()
        hub = Operator(operator_config("hub", port, certs=pki))
        await hub.start()
        try:

            def plain() -> bytes | str:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/signals", timeout=5) as r:
                        return bytes(r.read())
                except (urllib.error.URLError, ConnectionError, OSError) as exc:
                    return type(exc).__name__

            for _ in range(3):
                got = await asyncio.to_thread(plain)
                assert isinstance(got, str), got  # refused: never a body of ours
            await _until(
                lambda: _value(hub, "grid_signals_peer_refused_total", reason="plain_http") == 3,
                "three plain-HTTP handshakes counted",
            )
            relay = await _hub_relay(pki, port)
            assert relay == {}  # a TLS client with our certificate still reads
        finally:
            await hub.stop()

    asyncio.run(main())


def test_a_peer_answering_plain_http_where_tls_is_required_is_a_failed_poll(pki: Certs) -> None:
    """hub polls west over TLS; west restarts speaking plain HTTP on the same port:
    hub's polls fail as `bad_identity` (it proved no identity), and west's last good
    reading keeps serving."""

    async def main() -> None:
        hub_port, west_port = free_port(), free_port()
        hub = Operator(operator_config("hub", hub_port, certs=pki, peers={"west": west_port}))
        async with MetricsServer(vllm_page(5.0)) as metrics:
            west = _west(pki, west_port, hub_port, metrics.port, None)
            await hub.start()
            await west.start()
            try:
                await _until(lambda: "west/pool" in hub.store.latest(), "hub heard west")
                await west.stop()
                metrics.text = vllm_page(9.0)
                plain = operator_config(
                    "west", west_port, certs=None, providers=[vllm_provider("pool", metrics.port)]
                )
                west = Operator(plain)
                await west.start()
                await _until(
                    lambda: (
                        _value(hub, "grid_signals_poll_total", target="west", result="bad_identity")
                        >= 2
                    ),
                    "hub's polls of the plain-HTTP west failed",
                )
                assert (await _hub_relay(pki, hub_port))["west"] == 5.0
            finally:
                await west.stop()
                await hub.stop()

    asyncio.run(main())


@pytest.mark.parametrize(
    ("exc", "want"),
    [
        (ssl.SSLError(1, "[SSL: HTTP_REQUEST] http request (_ssl.c:1006)"), "plain_http"),
        (ConnectionAbortedError("SSL handshake is taking longer"), "handshake_timeout"),
        (ConnectionResetError("Connection lost"), "handshake_failed"),
        (ssl.SSLError(1, "[SSL] peer did not return a certificate"), "no_certificate"),
        (ssl.SSLError(1, "[SSL] tlsv1 alert unknown ca"), "untrusted_certificate"),
    ],
)
def test_refused_handshakes_are_named(exc: BaseException, want: str) -> None:
    assert refusal_of(exc) is HandshakeRefusal(want)
