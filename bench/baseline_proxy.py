"""The "what Python can do" baseline: a plain aiohttp + uvloop pass-through proxy.

It does the least a model-aware proxy must: read the body, parse the model out of the
JSON, forward to one backend over a keep-alive pool, stream the answer back. No
routing, accounting or metrics. bench_proxy.py measures gridroute against it.

    python bench/baseline_proxy.py PORT BACKEND_URL
"""

from __future__ import annotations

import json
import sys

import aiohttp
import uvloop
from aiohttp import web

HOP = frozenset({"connection", "keep-alive", "transfer-encoding", "host", "content-length"})


async def handle(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    model = json.loads(body).get("model")
    if not isinstance(model, str):
        return web.json_response({"error": {"message": "no model"}}, status=400)
    session: aiohttp.ClientSession = request.app["session"]
    headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP]
    async with session.post(
        request.app["backend"] + request.raw_path, data=body, headers=headers
    ) as up:
        resp = web.StreamResponse(
            status=up.status, headers={k: v for k, v in up.headers.items() if k.lower() not in HOP}
        )
        if up.content_length is not None:
            resp.content_length = up.content_length
        await resp.prepare(request)
        while chunk := await up.content.readany():
            await resp.write(chunk)
        await resp.write_eof()
        return resp


async def make_app(backend: str) -> web.Application:
    app = web.Application()
    app["backend"] = backend

    async def start(app: web.Application) -> None:
        app["session"] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=1024), auto_decompress=False
        )

    async def stop(app: web.Application) -> None:
        await app["session"].close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_post("/{tail:.*}", handle)
    return app


if __name__ == "__main__":
    port, backend = int(sys.argv[1]), sys.argv[2]
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    web.run_app(
        make_app(backend),
        host="127.0.0.1",
        port=port,
        access_log=None,
        print=None,
        backlog=1024,  # as gridroute's listener
        loop=uvloop.new_event_loop(),
    )
