"""Real HTTP endpoints on 127.0.0.1 for probe tests, and a real operator for readings."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable

from aiohttp import web


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Endpoint:
    """A home's serving endpoint whose probe answer a test sets (`status`)."""

    def __init__(self) -> None:
        self.status = 200
        self.port = free_port()
        self.hits = 0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _any(self, _: web.Request) -> web.Response:
        self.hits += 1
        return web.json_response({"object": "list", "data": []}, status=self.status)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._any)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


def vllm_page(endpoints: int) -> str:
    """A vLLM page with one series per engine: the operator counts them as ready."""
    lines = ["# TYPE vllm:num_requests_running gauge"]
    lines += [
        f'vllm:num_requests_running{{model_name="m",engine="{i}"}} 1' for i in range(endpoints)
    ]
    lines += [
        f'vllm:num_requests_waiting{{model_name="m",engine="{i}"}} 0' for i in range(endpoints)
    ]
    return "\n".join(lines) + "\n"


class Metrics:
    def __init__(self, endpoints: int) -> None:
        self.endpoints = endpoints
        self.port = free_port()
        self._runner: web.AppRunner | None = None

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(text=vllm_page(self.endpoints))

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


async def until(check: Callable[[], bool], what: str, rounds: int = 200) -> None:
    for _ in range(rounds):
        if check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")
