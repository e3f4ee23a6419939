"""Helpers for operator tests: certificates, free ports, fake metrics servers, raw peers."""

from __future__ import annotations

import asyncio
import email.utils
import socket
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry

from gridroute.operator.config import OperatorConfig, TLSFiles, parse_config
from gridroute.operator.tls import client_context, server_context
from gridroute.relay.poller import LOCAL_LIMITS, PollMetrics, PollOutcome, SignalsClient
from gridroute.wire.identity import spiffe_id

SITES = ["hub", "west", "east"]


@dataclass(frozen=True)
class Certs:
    root: Path
    foreign: Path

    def tls(self, site: str, root: Path | None = None) -> TLSFiles:
        base = root or self.root
        return TLSFiles(
            cert=base / site / "server.crt",
            key=base / site / "server.key",
            ca=self.root / "ca.crt",
            client_cert=base / site / "client.crt",
            client_key=base / site / "client.key",
        )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def operator_config(
    site: str,
    port: int,
    *,
    certs: Certs | None,
    peers: dict[str, int] | None = None,
    providers: list[dict[str, object]] | None = None,
    interval: float = 0.2,
) -> OperatorConfig:
    scheme = "https" if certs is not None else "http"
    data: dict[str, object] = {
        "site": site,
        "listen": f"127.0.0.1:{port}",
        "peers": [
            {"site": s, "url": f"{scheme}://127.0.0.1:{p}"} for s, p in (peers or {}).items()
        ],
        "providers": providers or [],
        "scrapeIntervalSeconds": interval,
        "peerPollIntervalSeconds": interval,
    }
    if certs is not None:
        data["tls"] = certs.tls(site).model_dump()
    return parse_config(data)


def vllm_provider(name: str, port: int, **extra: object) -> dict[str, object]:
    return {
        "name": name,
        "models": ["m"],
        "backendUrl": "http://127.0.0.1:1",
        "maxRunning": 16,
        "metricsConfig": {"endpoint": f"http://127.0.0.1:{port}/metrics", **extra},
    }


def vllm_page(running: float, waiting: float = 0.0) -> str:
    return (
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{model_name="m"}} {running}\n'
        f'vllm:num_requests_waiting{{model_name="m"}} {waiting}\n'
        'vllm:kv_cache_usage_perc{model_name="m"} 0.1\n'
    )


class MetricsServer:
    """A static vLLM-style /metrics page whose text (or status) tests can change."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.status = 200
        self.port = free_port()
        self._runner: web.AppRunner | None = None

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(text=self.text, status=self.status)

    async def __aenter__(self) -> MetricsServer:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._runner is not None
        await self._runner.cleanup()


@dataclass
class RawPeer:
    """A fake peer speaking raw HTTP/1.1 over mutual TLS, for replies aiohttp won't send.

    `respond(now)` returns (header lines, body, stall_after): the server writes the
    headers and the first `stall_after` body bytes, then waits forever.
    """

    tls: TLSFiles
    respond: Callable[[float], tuple[list[str], bytes, int | None]]
    port: int = field(default_factory=free_port)
    requests: int = 0
    _server: asyncio.Server | None = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                if line in (b"\r\n", b"\n"):
                    break
            self.requests += 1
            headers, body, stall_after = self.respond(time.time())
            head = "HTTP/1.1 200 OK\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n"
            writer.write(head.encode())
            if stall_after is None:
                writer.write(body)
                await writer.drain()
            else:
                writer.write(body[:stall_after])
                await writer.drain()
                await asyncio.sleep(3600)
        except (ConnectionError, ssl.SSLError):
            pass
        finally:
            writer.close()

    async def __aenter__(self) -> RawPeer:
        self._server = await asyncio.start_server(
            self._handle, "127.0.0.1", self.port, ssl=server_context(self.tls)
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        # don't wait for stalled handlers; close() stops the listener


def date_header(now: float) -> str:
    return "Date: " + email.utils.formatdate(now, usegmt=True)


def rows_body(lines: list[str]) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def client_ssl(tls: TLSFiles) -> ssl.SSLContext:
    return client_context(tls)


async def poll_as(
    target: str,
    url: str,
    ctx: ssl.SSLContext,
    *,
    metrics: PollMetrics | None = None,
    **options: Any,
) -> PollOutcome:
    """One poll of `url` by a new `SignalsClient` for `target`, on a connection of its
    own that is closed after; `options` as the client takes them (expected identity,
    expected site, limits)."""
    client = SignalsClient(
        target,
        url,
        metrics=metrics or PollMetrics(CollectorRegistry()),
        ssl_context=ctx,
        **options,
    )
    try:
        return await client.poll()
    finally:
        await client.close()


async def read_local(certs: Certs, port: int) -> PollOutcome:
    """What a gateway at hub reads from hub's operator at `port` now (every site's rows)."""
    return await poll_as(
        "local",
        f"https://127.0.0.1:{port}/signals",
        client_ssl(certs.tls("hub")),
        expected_identity=spiffe_id("gridroute.local", "hub"),
        limits=LOCAL_LIMITS,
    )
