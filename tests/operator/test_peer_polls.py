"""Every poll result and every ingest drop reason, against real TLS peers on loopback."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from aiohttp import web
from operator_fixtures import (
    Certs,
    RawPeer,
    client_ssl,
    date_header,
    free_port,
    operator_config,
    poll_as,
    rows_body,
)
from prometheus_client import CollectorRegistry

from gridroute.operator.service import Operator
from gridroute.operator.tls import server_context
from gridroute.relay.poller import PollLimits, PollMetrics, PollOutcome, SignalsClient
from gridroute.wire.identity import spiffe_id
from gridroute.wire.signals import PEER_MAX_LINES

Respond = Callable[[float], tuple[list[str], bytes, int | None]]


def ok_body(now: float, site: str = "west") -> bytes:
    stamp = round(now * 1000)
    return rows_body(
        [
            f'llm_d_epp_average_running_requests{{grid_site="{site}",grid_provider="p"}} 3 {stamp}',
            f'llm_d_epp_ready_endpoints{{grid_site="{site}",grid_provider="p"}} 1 {stamp}',
        ]
    )


def reply(body: Callable[[float], bytes], *, date: bool = True, length: bool = True) -> Respond:
    def respond(now: float) -> tuple[list[str], bytes, int | None]:
        data = body(now)
        headers = ["Content-Type: text/plain", "Connection: close"]
        if date:
            headers.append(date_header(now))
        if length:
            headers.append(f"Content-Length: {len(data)}")
        return headers, data, None

    return respond


async def poll_once(
    certs: Certs,
    peer_tls_site: str,
    respond: Respond,
    *,
    client_root: str = "root",
    peer_root: str = "root",
    timeout_s: float = 2.0,
) -> tuple[PollOutcome, CollectorRegistry]:
    """Start a raw peer with `peer_tls_site`'s certificate, poll it expecting `west`."""
    peer_base = certs.foreign if peer_root == "foreign" else None
    client_base = certs.foreign if client_root == "foreign" else None
    registry = CollectorRegistry()
    async with RawPeer(certs.tls(peer_tls_site, peer_base), respond) as peer:
        outcome = await poll_as(
            "west",
            f"https://127.0.0.1:{peer.port}/signals?scope=own",
            client_ssl(certs.tls("hub", client_base)),
            metrics=PollMetrics(registry),
            expected_identity=spiffe_id("gridroute.local", "west"),
            expected_site="west",
            limits=PollLimits(timeout_s=timeout_s),
        )
    total = sum(
        s.value
        for m in registry.collect()
        if m.name == "grid_signals_poll"
        for s in m.samples
        if s.name == "grid_signals_poll_total"
    )
    assert total == 1, "every poll ends in exactly one result"
    return outcome, registry


def test_ok(certs: Certs) -> None:
    outcome, registry = asyncio.run(poll_once(certs, "west", reply(ok_body)))
    assert outcome.result == "ok", outcome.error
    assert outcome.decoded is not None and len(outcome.decoded.samples) == 1
    assert registry.get_sample_value(
        "grid_signals_last_success_timestamp_seconds", {"target": "west"}
    )
    size = registry.get_sample_value("grid_signals_response_bytes", {"target": "west"})
    assert size is not None and size > len(ok_body(0))


def test_bad_identity_when_the_peer_presents_another_sites_certificate(certs: Certs) -> None:
    outcome, _ = asyncio.run(poll_once(certs, "east", reply(ok_body)))
    assert outcome.result == "bad_identity"
    assert "site/east" in (outcome.error or "")


def test_bad_identity_when_the_peer_certificate_is_from_a_foreign_ca(certs: Certs) -> None:
    outcome, _ = asyncio.run(poll_once(certs, "west", reply(ok_body), peer_root="foreign"))
    assert outcome.result == "bad_identity"


def test_unauthorized_when_our_client_certificate_is_from_a_foreign_ca(certs: Certs) -> None:
    outcome, _ = asyncio.run(poll_once(certs, "west", reply(ok_body), client_root="foreign"))
    assert outcome.result == "unauthorized", outcome.error


def test_unauthorized_on_http_403(certs: Certs) -> None:
    async def main() -> PollOutcome:
        async def deny(_: web.Request) -> web.Response:
            return web.Response(status=403)

        app = web.Application()
        app.router.add_get("/signals", deny)
        runner = web.AppRunner(app)
        await runner.setup()
        port = free_port()
        await web.TCPSite(
            runner, "127.0.0.1", port, ssl_context=server_context(certs.tls("west"))
        ).start()
        try:
            return await poll_as(
                "west",
                f"https://127.0.0.1:{port}/signals",
                client_ssl(certs.tls("hub")),
                expected_identity=spiffe_id("gridroute.local", "west"),
            )
        finally:
            await runner.cleanup()

    assert asyncio.run(main()).result == "unauthorized"


@pytest.mark.parametrize("declared", [True, False])
def test_too_large(certs: Certs, declared: bool) -> None:
    big = b"#" * (1024 * 1024 + 10)
    outcome, registry = asyncio.run(
        poll_once(certs, "west", reply(lambda now: big, length=declared))
    )
    assert outcome.result == "too_large"
    assert registry.get_sample_value("grid_signals_response_bytes", {"target": "west"}) > 1 << 20


def test_no_date(certs: Certs) -> None:
    outcome, _ = asyncio.run(poll_once(certs, "west", reply(ok_body, date=False)))
    assert outcome.result == "no_date"


def test_a_peer_that_stalls_mid_body_is_unreachable(certs: Certs) -> None:
    def stall(now: float) -> tuple[list[str], bytes, int | None]:
        body = ok_body(now)
        return [date_header(now), f"Content-Length: {len(body)}"], body, 10

    outcome, _ = asyncio.run(poll_once(certs, "west", stall, timeout_s=0.3))
    assert outcome.result == "unreachable"
    assert "Timeout" in (outcome.error or "")


def test_unreachable_when_nothing_listens(certs: Certs) -> None:
    async def main() -> PollOutcome:
        url = f"https://127.0.0.1:{free_port()}/signals"
        return await poll_as("west", url, client_ssl(certs.tls("hub")))

    assert asyncio.run(main()).result == "unreachable"


def test_operator_drops_untrusted_rows_by_reason_and_keeps_the_rest(certs: Certs) -> None:
    def body(now: float) -> bytes:
        ms = round(now * 1000)
        late = ms + 5000
        lines = [
            f'llm_d_epp_average_running_requests{{grid_site="west",grid_provider="good"}} 4 {ms}',
            f'llm_d_epp_average_running_requests{{grid_site="west",grid_provider="late"}} 4 {late}',
            f'llm_d_epp_average_running_requests{{grid_site="east",grid_provider="p"}} 9 {ms}',
            "this is not a row",
        ]
        lines += [
            f'llm_d_epp_average_queue_size{{grid_site="west",grid_provider="good"}} 0 {ms - i}'
            for i in range(1, PEER_MAX_LINES)
        ]
        return rows_body(lines)

    async def main() -> Operator:
        async with RawPeer(certs.tls("west"), reply(body)) as peer:
            op = Operator(
                operator_config("hub", free_port(), certs=certs, peers={"west": peer.port})
            )
            await op.start()
            try:
                for _ in range(200):  # until a poll completed (it may outlive its round)
                    if op.peers[0].latest is not None:
                        break
                    await asyncio.sleep(0.05)
            finally:
                await op.stop()
        return op

    op = asyncio.run(main())
    registry = op.metrics.registry

    def dropped(reason: str) -> float | None:
        return registry.get_sample_value(
            "grid_signals_ingest_dropped_total", {"target": "west", "reason": reason}
        )

    # Counted per completed poll (a poll still running at a round's end is not one).
    rounds = registry.get_sample_value(
        "grid_signals_poll_total", {"target": "west", "result": "ok"}
    )
    assert rounds is not None and rounds >= 1
    assert dropped("skew") == rounds
    assert dropped("site_mismatch") == rounds
    assert dropped("parse") == rounds
    assert dropped("cap") == 3 * rounds  # 4 + 4095 lines, 4096 read
    latest = op.store.latest()
    assert set(latest) == {"west/good"}
    assert latest["west/good"].running == 4.0


@pytest.mark.parametrize(
    "garbage",
    [b"<html>502 Bad Gateway</html>\n", b"\xff\xfe\x00\x01", b"", b"ok\n"],
    ids=["html", "binary", "empty", "text"],
)
def test_a_200_of_garbage_is_a_failed_poll_undecodable(certs: Certs, garbage: bytes) -> None:
    async def main() -> tuple[SignalsClient, list[PollOutcome], CollectorRegistry]:
        registry = CollectorRegistry()
        bodies = [ok_body, lambda now: garbage]
        served: list[int] = []

        def respond(now: float) -> tuple[list[str], bytes, int | None]:
            data = bodies[min(len(served), 1)](now)
            served.append(1)
            headers = ["Connection: close", date_header(now), f"Content-Length: {len(data)}"]
            return headers, data, None

        async with RawPeer(certs.tls("west"), respond) as peer:
            client = SignalsClient(
                "west",
                f"https://127.0.0.1:{peer.port}/signals?scope=own",
                metrics=PollMetrics(registry),
                ssl_context=client_ssl(certs.tls("hub")),
                expected_identity=spiffe_id("gridroute.local", "west"),
                expected_site="west",
            )
            try:
                outcomes = [await client.poll(), await client.poll()]
            finally:
                await client.close()
        return client, outcomes, registry

    client, (good, bad), registry = asyncio.run(main())
    assert good.result == "ok"
    assert bad.result == "undecodable" and bad.decoded is None
    assert client.failing and client.last_ok is good
    assert (
        registry.get_sample_value(
            "grid_signals_poll_total", {"target": "west", "result": "undecodable"}
        )
        == 1
    )
