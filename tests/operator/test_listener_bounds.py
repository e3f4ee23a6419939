"""The operator's TLS listener has the gateway's bounds: a slow sender gets 408."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.inbound.rawhttp import closed, read_answer

from gridroute.inbound.client_errors import Kind
from gridroute.operator.certs import init_certs
from gridroute.operator.config import TLSFiles, client_files, parse_config
from gridroute.operator.service import Operator
from gridroute.relay.poller import client_ssl_context


def test_a_slow_tls_client_gets_408_and_close(tmp_path: Path) -> None:
    init_certs(tmp_path, ["hub", "west"])
    tls = TLSFiles(
        cert=tmp_path / "hub" / "server.crt",
        key=tmp_path / "hub" / "server.key",
        ca=tmp_path / "ca.crt",
    )
    cfg = parse_config(
        {
            "site": "hub",
            "listen": "127.0.0.1:0",
            "tls": tls.model_dump(),
            "listener": {"headerTimeoutS": 0.3, "keepaliveTimeoutS": 0.3},
        }
    )
    op = Operator(cfg)
    west = TLSFiles(
        cert=tmp_path / "west" / "client.crt",
        key=tmp_path / "west" / "client.key",
        ca=tmp_path / "ca.crt",
    )
    ctx = client_ssl_context(client_files(west))

    async def scenario() -> None:
        await op.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", op.port, ssl=ctx)
            writer.write(b"GET /signals HTTP/1.1\r\nHost: t\r\n")
            answer = await read_answer(reader)
            assert answer is not None and answer.status == 408
            assert answer.json()["error"]["code"] == "timeout"
            assert await closed(reader)
            writer.close()
            assert op.client_errors.counts[Kind.HEADER_TIMEOUT] == 1
        finally:
            await op.stop()

    asyncio.run(asyncio.wait_for(scenario(), 20))
