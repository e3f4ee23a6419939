"""`gridroute load` against a fake server and a stub gateway on loopback."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp import web
from typer.testing import CliRunner

from gridroute.cli import app
from gridroute.fakeserver.server import FakeServerConfig, start_fake_server


@contextmanager
def serving(start: Callable[[], Any]) -> Iterator[str]:
    """Run an async server (`start()` returns an object with `url` and `close()`) on its
    own loop in a thread, so the CLI under test can run its own `asyncio.run`."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield str(server.url)
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


class _StubGateway:
    """Answers like a gateway: sites in turn hub, west, west, and every 6th request 429."""

    def __init__(self) -> None:
        self.seq = itertools.count(1)
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> _StubGateway:
        app = web.Application()
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/v1/chat/completions", self.chat)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self

    async def models(self, _req: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "llama-3.1-8b"}]})

    async def chat(self, req: web.Request) -> web.Response:
        body = await req.json()
        assert body["model"] == "llama-3.1-8b"
        n = next(self.seq)
        if n % 6 == 0:
            return web.json_response({"error": {}}, status=429, headers={"Retry-After": "0"})
        site = ("hub", "west", "west")[(n - 1 - n // 6) % 3]
        return web.json_response({"choices": []}, headers={"x-grid-site": site})

    async def close(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()


def test_load_against_a_fake_server_counts_every_request(tmp_path: Path) -> None:
    async def start() -> Any:
        cfg = FakeServerConfig(models=["m"], slots=4, service_s=0.0, name="A")
        return await start_fake_server(cfg)

    with serving(start) as url:
        out = tmp_path / "load.json"
        result = CliRunner().invoke(
            app,
            ["load", "--url", url, "--model", "m", "--clients", "4", "--requests", "20",
             "--duration", "30", "--stream", "--json", str(out)],
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(out.read_text())
    assert summary["requests"] == summary["ok"] == 20
    assert summary["per_site"] == {"A": 20}
    for column in ("requests", "ok", "429", "failed", "req/s", "p50 s", "p99 s"):
        assert column in result.output
    assert "│ A    │ 20 │ 1.000 │" in result.output


def test_load_splits_shares_by_x_grid_site_and_counts_429s(tmp_path: Path) -> None:
    stub = _StubGateway()
    with serving(stub.start) as url:
        out = tmp_path / "load.json"
        result = CliRunner().invoke(
            app, ["load", "--url", url, "--clients", "1", "--requests", "36",
                  "--json", str(out), "--progress", "0.01"],
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads(out.read_text())
    assert summary["model"] == "llama-3.1-8b"  # asked GET /v1/models
    assert (summary["requests"], summary["ok"], summary["shed"]) == (36, 30, 6)
    assert summary["per_site"] == {"west": 20, "hub": 10}
    assert "1 clients  ok 30  429 6  failed 0  other 4xx 0" in result.output  # progress
    assert "│ west │ 20 │ 0.667 │" in result.output
    assert "│ hub  │ 10 │ 0.333 │" in result.output


def test_load_exits_1_when_nothing_answers() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    no_model = CliRunner().invoke(app, ["load", "--url", url])
    assert no_model.exit_code == 1
    assert "/v1/models failed" in no_model.output and "give --model" in no_model.output
    refused = CliRunner().invoke(
        app, ["load", "--url", url, "--model", "m", "--requests", "3", "--progress", "0"]
    )
    assert refused.exit_code == 1
    assert "no request succeeded" in refused.output
