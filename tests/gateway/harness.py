"""An in-process grid for gateway tests: fake model servers + one gateway on loopback.

Everything runs in one event loop (tests call `asyncio.run`), so a test can read the
gateway's own counters and the fake servers' state directly, and feed load to the
core with `Grid.feed` instead of running operators (tests/e2e does that).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import openai
from aiohttp import web

from gridroute.core import Sample
from gridroute.fakeserver.server import RunningFakeServer, start_fake_server
from gridroute.fakeserver.settings import FakeServerConfig
from gridroute.gateway import upstream
from gridroute.gateway.app import create_app
from gridroute.gateway.config import GatewayConfig
from gridroute.gateway.dataplane import DataPlane
from gridroute.gateway.runtime import Gateway
from gridroute.gateway.serve import start_listener
from gridroute.inbound.guard import GuardedRunner

MODEL = "m"

LISTENERS = ("aiohttp", "dataplane", "spliced")
"""The API listeners a test can run against (`listener.dataplane` off and on; `spliced`:
on, with a kept-alive connection open in every backend's pool before the test)."""
listener_kind = "aiohttp"
"""Which one `running_grid` starts (the `each_listener` fixture sets it): the aiohttp
listener unless a test asks for the data plane, though the data plane is the gateway's
default (`listener.dataplane`), so that the tests written for one listener keep
testing the one that serves everything when the data plane is off; the end-to-end
suites, which start gateways from configs, run the default."""


@dataclass
class Grid:
    gw: Gateway
    url: str
    servers: dict[str, RunningFakeServer]
    runner: web.AppRunner
    clients: list[openai.AsyncOpenAI] = field(default_factory=list)
    plane: DataPlane | None = None
    """The data-plane listener when the grid runs on it."""

    def client(self, **kw: Any) -> openai.AsyncOpenAI:
        """An official client pointed at the gateway (closed with the grid)."""
        kw.setdefault("api_key", "unused")
        c = openai.AsyncOpenAI(base_url=self.url + "/v1", max_retries=0, **kw)
        self.clients.append(c)
        return c

    def feed(self, loads: dict[str, tuple[float, float, float]]) -> None:
        """Publish one sample per site: (running, waiting, max_running), fresh now."""
        now = time.time()
        samples = [
            Sample(site, site, now, running=r, waiting=w, ready=1.0, max_running=m, generation=1)
            for site, (r, w, m) in loads.items()
        ]
        self.gw.current.refresh(samples, {site: now for site in loads}, now)

    def in_flight(self) -> int:
        return self.gw.current.own.total()


def config(
    urls: dict[str, str], site_extra: dict[str, dict[str, Any]] | None = None, **overrides: Any
) -> GatewayConfig:
    """A gateway config in front of `urls`; `site_extra[name]` adds fields to a site."""
    extra = site_extra or {}
    data: dict[str, Any] = {
        "listen": "127.0.0.1:0",
        "sites": [
            {"name": name, "backend_url": url, **extra.get(name, {})} for name, url in urls.items()
        ],
        "models": [{"name": MODEL}],
        "health": {"enabled": False},
    }
    data.update(overrides)
    return GatewayConfig.model_validate(data)


@contextlib.asynccontextmanager
async def running_grid(
    sites: dict[str, FakeServerConfig | str],
    site_extra: dict[str, dict[str, Any]] | None = None,
    **overrides: Any,
) -> AsyncIterator[Grid]:
    """Start fake servers (or use given URLs) and a gateway in front of them."""
    servers: dict[str, RunningFakeServer] = {}
    urls: dict[str, str] = {}
    for name, spec in sites.items():
        if isinstance(spec, str):
            urls[name] = spec
        else:
            servers[name] = await start_fake_server(spec)
            urls[name] = servers[name].url
    listener = {"dataplane": listener_kind != "aiohttp", **overrides.get("listener", {})}
    overrides["listener"] = listener
    gw = Gateway(config(urls, site_extra, **overrides))
    runner = GuardedRunner(
        create_app(gw), guard=gw.guard, handler_cancellation=True, access_log=None
    )
    await runner.setup()
    plane = await start_listener(gw, runner, "127.0.0.1", 0)
    port = (runner.addresses if plane is None else plane.addresses)[0][1]
    grid = Grid(gw, f"http://127.0.0.1:{port}", servers, runner, plane=plane)
    if listener_kind == "spliced" and plane is not None:
        await warm_pools(gw)
    try:
        yield grid
    finally:
        for c in grid.clients:
            await c.close()
        if plane is not None:
            await plane.shutdown(0.0)
        await runner.cleanup()
        for srv in servers.values():
            await srv.close()


async def warm_pools(gw: Gateway) -> None:
    """One idle kept-alive connection in each backend's pool (none where the backend
    does not accept): no request is sent, so no counter of a test moves."""
    for backend in gw.backends.by_key.values():
        pool = backend.pool
        try:
            conn = await pool._connect()
        except upstream.UpstreamError:
            continue
        pool.put_back(conn)


def fake(name: str, **kw: Any) -> FakeServerConfig:
    kw.setdefault("service_s", 0.0)
    kw.setdefault("tokens", 4)
    return FakeServerConfig(models=[MODEL], name=name, **kw)


def run(scenario: Callable[[], Awaitable[None]], timeout: float = 30.0) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(scenario(), timeout)

    asyncio.run(bounded())


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> None:
    """Wait (polling) until `check()` holds; fail the test with a clear message if not."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(0.01)
