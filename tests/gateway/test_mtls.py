"""Mutual TLS toward a site's backend (probes and proxying) and toward the local operator.

Certificates are made at test time with `gridroute.operator.certs` (one CA, a server
and a client certificate per site, naming the site by SPIFFE URI, `localhost` and
127.0.0.1), and every TLS listener here requires a client certificate from that CA.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from gridroute.core import Health
from gridroute.fakeserver.server import create_app as fake_app
from gridroute.fakeserver.server import start_fake_server
from gridroute.operator.certs import init_certs
from gridroute.operator.config import TLSFiles
from gridroute.operator.config import parse_config as operator_config
from gridroute.operator.service import Operator
from gridroute.operator.tls import server_context
from gridroute.relay.poller import PollResult
from gridroute.wire.identity import spiffe_id
from tests.gateway.harness import MODEL, eventually, fake, run, running_grid

CHAT = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("certs")
    init_certs(root, ["hub", "a"])
    return root


def server_tls(certs: Path, site: str) -> TLSFiles:
    return TLSFiles(
        cert=certs / site / "server.crt", key=certs / site / "server.key", ca=certs / "ca.crt"
    )


def client_tls(certs: Path, site: str, *, cert: bool = True) -> dict[str, Any]:
    """A gateway `tls:` block: the CA, and this site's client certificate."""
    tls: dict[str, Any] = {"ca_file": str(certs / "ca.crt")}
    if cert:
        tls["cert_file"] = str(certs / site / "client.crt")
        tls["key_file"] = str(certs / site / "client.key")
    return tls


@contextlib.asynccontextmanager
async def mtls_fake_server(certs: Path, site: str) -> AsyncIterator[str]:
    """The fake model server over TLS, refusing clients without a certificate."""
    runner = web.AppRunner(
        fake_app(fake(site)), handler_cancellation=True, access_log=None, shutdown_timeout=0.5
    )
    await runner.setup()
    await web.TCPSite(
        runner, "127.0.0.1", 0, ssl_context=server_context(server_tls(certs, site))
    ).start()
    try:
        yield f"https://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def test_mtls_backend_is_probed_and_proxied_over_mutual_tls(certs: Path) -> None:
    """`a` presents a's client certificate; `nocert` is the same backend without one, so
    its probes fail (the listener requires a certificate) and it is demoted."""

    async def scenario() -> None:
        async with mtls_fake_server(certs, "a") as url:
            health = {"enabled": True, "interval_s": 0.05, "rise": 2, "fall": 2}
            extra = {
                "a": {"tls": client_tls(certs, "a")},
                "nocert": {"tls": client_tls(certs, "a", cert=False)},
            }
            models = [{"name": MODEL, "policy": "first"}]
            sites: dict[str, Any] = {"nocert": url, "a": url}
            async with running_grid(
                sites, extra, health=health, local_site="nocert", models=models
            ) as g:
                current = g.gw.current
                await eventually(lambda: current.health.get("a/a") is Health.UP)
                await eventually(lambda: current.health.get("nocert/nocert") is Health.DOWN)
                assert g.gw.prober.tracks["a/a"].last_error is None
                assert g.gw.prober.tracks["nocert/nocert"].last_error
                client = g.client()
                raw = await client.chat.completions.with_raw_response.create(
                    model=MODEL, messages=CHAT
                )
                assert raw.status_code == 200
                assert raw.headers["x-grid-site"] == "a"  # nocert is the front but demoted
                stream = await client.chat.completions.create(
                    model=MODEL, messages=CHAT, stream=True
                )
                chunks = [c async for c in stream]
                assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                assert g.in_flight() == 0

    run(scenario)


def test_refused_client_certificate_is_retried_on_another_site(certs: Path) -> None:
    """Before any probe verdict, the front site's TLS refusal (no client certificate)
    fails the attempt before any byte went to the client: retried once, on `a`."""

    async def scenario() -> None:
        async with mtls_fake_server(certs, "a") as url:
            extra = {
                "a": {"tls": client_tls(certs, "a")},
                "nocert": {"tls": client_tls(certs, "a", cert=False)},
            }
            models = [{"name": MODEL, "policy": "first"}]
            sites: dict[str, Any] = {"nocert": url, "a": url}
            async with running_grid(sites, extra, local_site="nocert", models=models) as g:
                g.feed({"nocert": (0.0, 0.0, 8.0), "a": (0.0, 0.0, 8.0)})
                raw = await g.client().chat.completions.with_raw_response.create(
                    model=MODEL, messages=CHAT
                )
                assert raw.headers["x-grid-site"] == "a"
                reg = g.gw.metrics.registry
                retried = sum(
                    s.value
                    for m in reg.collect()
                    if m.name == "grid_route_retries"
                    for s in m.samples
                    if s.name.endswith("_total") and s.labels["site"] == "nocert"
                )
                assert retried == 1
                assert g.in_flight() == 0

    run(scenario)


def _operator(certs: Path, metrics_url: str) -> Operator:
    return Operator(
        operator_config(
            {
                "site": "hub",
                "listen": "127.0.0.1:0",
                "tls": {
                    **server_tls(certs, "hub").model_dump(),
                    "client_cert": certs / "hub" / "client.crt",
                    "client_key": certs / "hub" / "client.key",
                },
                "providers": [
                    {
                        "name": "pool",
                        "models": [MODEL],
                        "backendUrl": "http://127.0.0.1:1",
                        "maxRunning": 16,
                        "metricsConfig": {"endpoint": metrics_url},
                    }
                ],
                "scrapeIntervalSeconds": 0.1,
                "peerPollIntervalSeconds": 0.1,
            }
        )
    )


def _poll_total(g: Any, result: str) -> float:
    value = g.gw.metrics.registry.get_sample_value(
        "grid_signals_poll_total", {"target": "local", "result": result}
    )
    return 0.0 if value is None else value


def test_gateway_reads_its_operator_over_mutual_tls(certs: Path) -> None:
    """The gateway presents its site's client certificate to its operator and checks the
    operator's SPIFFE identity; the polled rows make `hub` measured and routed on load."""

    async def scenario() -> None:
        srv = await start_fake_server(fake("hub"))
        op = _operator(certs, srv.url + "/metrics")
        await op.start()
        try:
            base = f"https://127.0.0.1:{op.port}"
            operator = {
                "url": base,
                "tls": client_tls(certs, "hub"),
                "identity": spiffe_id("gridroute.local", "hub"),
                "poll_interval_s": 0.1,
            }
            extra = {"hub": {"provider": "pool"}}
            async with running_grid(
                {"hub": srv.url}, extra, local_site="hub", operator=operator
            ) as g:
                loop = g.gw.signals
                assert loop is not None
                await eventually(
                    lambda: (v := g.gw.current.snapshot.view("hub/pool")) is not None and v.measured
                )
                assert loop.latest is not None and loop.latest.result is PollResult.OK
                assert _poll_total(g, "ok") >= 1
                raw = await g.client().chat.completions.with_raw_response.create(
                    model=MODEL, messages=CHAT
                )
                assert raw.headers["x-grid-site"] == "hub"
                assert raw.headers["x-grid-backend"] == "pool"
                assert g.gw.ready

            # Without a client certificate the operator refuses the poll; with a wrong
            # identity the gateway refuses the operator. Neither makes a snapshot.
            for tls, identity, result in (
                (
                    client_tls(certs, "hub", cert=False),
                    spiffe_id("gridroute.local", "hub"),
                    PollResult.UNAUTHORIZED,
                ),
                (
                    client_tls(certs, "hub"),
                    spiffe_id("gridroute.local", "a"),
                    PollResult.BAD_IDENTITY,
                ),
            ):
                bad = {**operator, "tls": tls, "identity": identity}
                async with running_grid(
                    {"hub": srv.url}, extra, local_site="hub", operator=bad
                ) as g:
                    await eventually(
                        lambda: g.gw.signals is not None and g.gw.signals.completed > 0
                    )
                    latest = g.gw.signals.latest if g.gw.signals is not None else None
                    assert latest is not None and latest.result is result, latest
                    view = g.gw.current.snapshot.view("hub/pool")
                    assert view is not None and not view.measured
        finally:
            await op.stop()
            await srv.close()

    run(scenario)
