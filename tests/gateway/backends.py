"""Tiny purpose-built backends for what the fake model server does not do on cue."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web


@contextlib.asynccontextmanager
async def serve(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def echo_app(seen: list[dict[str, Any]]) -> web.Application:
    """Answers every POST with a chat completion and records what it received."""

    async def handler(request: web.Request) -> web.Response:
        body = await request.read()
        seen.append({"headers": dict(request.headers), "body": body, "path": request.path_qs})
        return web.json_response(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "hi"},
                        "finish_reason": "stop",
                    }
                ],
            },
            headers={"x-grid-site": "spoofed", "x-upstream": "kept"},
        )

    app = web.Application()
    app.router.add_post("/{tail:.*}", handler)
    return app


def breaking_app(sent: list[int]) -> web.Application:
    """Sends the headers and part of a body, then drops the connection."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        sent.append(1)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"partial": true}\n\n')
        await asyncio.sleep(0.05)
        assert request.transport is not None
        request.transport.abort()
        return resp

    app = web.Application()
    app.router.add_post("/{tail:.*}", handler)
    return app


def stalling_app(cancelled: list[int]) -> web.Application:
    """Streams three SSE chunks 50 ms apart, then goes silent; records its cancellation."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            for i in range(3):
                await resp.write(f'data: {{"i": {i}}}\n\n'.encode())
                await asyncio.sleep(0.05)
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(1)
            raise
        return resp

    app = web.Application()
    app.router.add_post("/{tail:.*}", handler)
    return app


def closed_port() -> str:
    """A loopback URL nothing listens on (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"
