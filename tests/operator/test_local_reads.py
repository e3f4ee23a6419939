"""The local gateway's reads of `/signals` are served ahead of peer polling.

Peer polling work that holds its thread (a slow, CPU-bound peer set: here every
peer's decode is held until the test lets it go, as a hog would hold it) must not
delay the local gateway's read of its operator: in wave 1 that read timed out with
the rest and every site, the local one included, went unmeasured. The operator runs
its peer rounds on their own thread, so the read is answered, with the site's own
fresh rows, while every peer poll is still stuck; and the peers' rows arrive once
the work is let go.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from operator_fixtures import MetricsServer, free_port, operator_config, vllm_page, vllm_provider
from prometheus_client import CollectorRegistry
from test_peer_rounds import Peer

from gridroute.operator.service import Operator
from gridroute.relay import poller
from gridroute.relay.poller import PollLimits, PollMetrics, PollResult, SignalsClient

PEERS = [f"peer{i}" for i in range(6)]


async def until(check: Any, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not reached: {what}"
        await asyncio.sleep(0.02)


def test_the_local_read_is_answered_while_every_peer_poll_is_stuck(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    held = threading.Event()
    stuck: list[str] = []
    real_decode = poller.decode_relay

    def slow_peer_decode(*args: Any, **kwargs: Any) -> Any:
        # Only the operator's peer polls are slowed; the gateway's read decodes at once.
        if kwargs.get("expected_site") in PEERS:
            stuck.append(kwargs.get("expected_site") or "?")
            held.wait(timeout=20.0)  # a hog holding the peer work (bounded, for safety)
        return real_decode(*args, **kwargs)

    monkeypatch.setattr(poller, "decode_relay", slow_peer_decode)

    async def scenario() -> None:
        peers = [Peer(site) for site in PEERS]
        for p in peers:
            await p.__aenter__()
        async with MetricsServer(vllm_page(3.0)) as metrics_srv:
            op = Operator(
                operator_config(
                    "hub",
                    free_port(),
                    certs=None,
                    peers={p.site: p.port for p in peers},
                    providers=[vllm_provider("pool", metrics_srv.port)],
                )
            )
            await op.start()
            gateway = SignalsClient(
                "hub",
                f"http://127.0.0.1:{op.port}/signals",
                metrics=PollMetrics(CollectorRegistry()),
                limits=PollLimits(timeout_s=5.0),
            )
            try:
                await until(lambda: len(stuck) >= 1, "a peer poll stuck in its work")
                for _ in range(3):  # several reads, each answered with the work held
                    read = await gateway.poll()
                    assert not held.is_set()
                    assert read.result is PollResult.OK and read.decoded is not None
                    sites = {s.site for s in read.decoded.samples}
                    assert "hub" in sites and not sites & set(PEERS)
                    newest = max(s.at for s in read.decoded.samples if s.site == "hub")
                    assert time.time() - newest < 5.0  # the site's own rows keep coming
                assert all(p.requests >= 1 for p in peers)  # every peer was being polled
                held.set()
                await until(
                    lambda: all(f"{s}/p" in op.store.latest() for s in PEERS),
                    "every peer's rows stored once the work was let go",
                )
                read = await gateway.poll()
                assert read.decoded is not None
                assert {s.site for s in read.decoded.samples} >= {"hub", *PEERS}
            finally:
                held.set()
                await gateway.close()
                await op.stop()
                for p in peers:
                    await p.__aexit__()

    asyncio.run(scenario())
