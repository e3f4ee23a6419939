"""A new connection to a peer resumes its last TLS session instead of a full handshake.

A real operator serves over mutual TLS; a poller drops its connection between polls
(as a given-up poll or a peer's idle close would). With one resuming context per
peer, as the operator builds them, the second connection resumes the first one's
session, and the peer's identity is still checked on it; a plain context pays the
full handshake each time.
"""

from __future__ import annotations

import asyncio
import ssl

from operator_fixtures import Certs, free_port, operator_config, poll_as
from prometheus_client import CollectorRegistry

from gridroute.operator.service import Operator
from gridroute.operator.tls import client_context
from gridroute.relay.poller import PollMetrics, PollOutcome, PollResult
from gridroute.relay.tls_resumption import ResumingContext
from gridroute.wire.identity import spiffe_id


async def poll_as_west(port: int, metrics: PollMetrics, ctx: ssl.SSLContext) -> PollOutcome:
    """One poll of the operator at `port`, expecting west, on a client of its own (so
    its connection is new, and gone after the poll)."""
    return await poll_as(
        "west",
        f"https://127.0.0.1:{port}/signals?scope=own",
        ctx,
        metrics=metrics,
        expected_identity=spiffe_id("gridroute.local", "west"),
        expected_site="west",
    )


def handshakes(registry: CollectorRegistry, kind: str) -> float:
    value = registry.get_sample_value(
        "grid_signals_tls_handshakes_total", {"target": "west", "kind": kind}
    )
    return value or 0.0


def test_a_new_connection_resumes_the_peers_last_session(certs: Certs) -> None:
    async def scenario() -> None:
        west = Operator(operator_config("west", free_port(), certs=certs))
        await west.start()
        try:
            for resume in (True, False):
                registry = CollectorRegistry()
                metrics = PollMetrics(registry)
                ctx = client_context(certs.tls("hub"), resume=resume)
                assert isinstance(ctx, ResumingContext) is resume
                for _ in range(3):  # each poll on a new connection
                    outcome = await poll_as_west(west.port, metrics, ctx)
                    assert outcome.result is PollResult.OK, outcome.error
                if resume:
                    assert (handshakes(registry, "full"), handshakes(registry, "resumed")) == (
                        1.0,
                        2.0,
                    )
                else:
                    assert (handshakes(registry, "full"), handshakes(registry, "resumed")) == (
                        3.0,
                        0.0,
                    )
        finally:
            await west.stop()

    asyncio.run(scenario())


def test_a_resumed_session_is_offered_only_to_its_own_peer(certs: Certs) -> None:
    """The operator builds one context per peer: a session never crosses peers, and a
    peer that is not the expected site is refused even when a session is at hand."""

    async def scenario() -> None:
        west = Operator(operator_config("west", free_port(), certs=certs))
        east = Operator(operator_config("east", free_port(), certs=certs))
        await west.start()
        await east.start()
        metrics = PollMetrics(CollectorRegistry())
        ctx = client_context(certs.tls("hub"), resume=True)
        try:
            assert (await poll_as_west(west.port, metrics, ctx)).result is PollResult.OK
            assert isinstance(ctx, ResumingContext) and ctx.session is not None
            # East's listener is another server: it cannot resume west's session, and
            # its certificate does not name west, so the poll is refused all the same.
            impostor = await poll_as_west(east.port, metrics, ctx)
            assert impostor.result is PollResult.BAD_IDENTITY
        finally:
            await west.stop()
            await east.stop()

    asyncio.run(scenario())
