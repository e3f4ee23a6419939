"""TLS session resumption on peer polls: CPU of a poll on a new connection.

A real operator listener (mutual TLS, `server_context`) and a peer poller
(`SignalsClient`, the operator's own client) in one process; every poll is made on
a new connection (the client is closed after each), as after a given-up poll, a
restarted peer or an idle close. Rows: a plain context (a full handshake each time,
the baseline) and a `ResumingContext` (the operator's per-peer context), in
alternating blocks in the same run. CPU is this process's (both ends of the
handshake), per poll.

    .venv/bin/python bench/bench_tls_resume.py [--polls 400]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import socket
import tempfile
import time
from pathlib import Path

from prometheus_client import CollectorRegistry

from gridroute.operator.certs import init_certs
from gridroute.operator.config import TLSFiles, parse_config
from gridroute.operator.service import Operator
from gridroute.operator.tls import client_context
from gridroute.relay.poller import PollMetrics, PollResult, SignalsClient
from gridroute.wire.identity import spiffe_id

BLOCKS = 4


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tls(root: Path, site: str) -> TLSFiles:
    return TLSFiles(
        cert=root / site / "server.crt",
        key=root / site / "server.key",
        ca=root / "ca.crt",
        client_cert=root / site / "client.crt",
        client_key=root / site / "client.key",
    )


async def polls(port: int, ctx: object, n: int, metrics: PollMetrics) -> float:
    """CPU seconds of `n` polls, each on a new connection."""
    cpu0 = time.process_time()
    for _ in range(n):
        client = SignalsClient(
            "west",
            f"https://127.0.0.1:{port}/signals?scope=own",
            metrics=metrics,
            ssl_context=ctx,  # type: ignore[arg-type]
            expected_identity=spiffe_id("gridroute.local", "west"),
            expected_site="west",
        )
        try:
            outcome = await client.poll()
        finally:
            await client.close()
        assert outcome.result is PollResult.OK, outcome.error
    return time.process_time() - cpu0


async def main(n: int) -> None:
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        init_certs(root, ["hub", "west"])
        cfg = parse_config(
            {
                "site": "west",
                "listen": f"127.0.0.1:{free_port()}",
                "providers": [],
                "tls": tls(root, "west").model_dump(),
            }
        )
        west = Operator(cfg)
        await west.start()
        registry = CollectorRegistry()
        metrics = PollMetrics(registry)
        cpu = {"full": 0.0, "resumed": 0.0}
        try:
            per_block = max(1, n // BLOCKS)
            for _ in range(BLOCKS):
                for kind in ("full", "resumed"):
                    ctx = client_context(tls(root, "hub"), resume=kind == "resumed")
                    cpu[kind] += await polls(west.port or 0, ctx, per_block, metrics)
        finally:
            await west.stop()
        total = per_block * BLOCKS

        def count(kind: str) -> float:
            labels = {"target": "west", "kind": kind}
            return registry.get_sample_value("grid_signals_tls_handshakes_total", labels) or 0.0

        print(f"bench_tls_resume: {total} polls per row, each on a new mTLS connection")
        print(f"{'':28}{'CPU per poll ms':>16}{'ratio':>8}")
        base = cpu["full"] / total
        for kind in ("full", "resumed"):
            per = cpu[kind] / total
            print(f"{kind + ' handshake':28}{1e3 * per:>16.2f}{per / base:>8.2f}")
        print(
            f"handshakes counted: {count('full'):.0f} full, {count('resumed'):.0f} resumed "
            f"(the resuming context's first connection in each block is full)"
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--polls", type=int, default=400)
    asyncio.run(main(ap.parse_args().polls))
