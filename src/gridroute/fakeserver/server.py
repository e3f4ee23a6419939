"""A fake OpenAI-compatible model server that behaves like a vLLM engine under load.

It answers `/v1/chat/completions`, `/v1/completions`, `/v1/embeddings`, `/v1/responses`
and `/v1/models` with bodies the official `openai` client parses, runs at most `slots`
requests per model at once and queues the rest FIFO, streams one SSE chunk per token,
and exposes vLLM's own `/metrics` series, so a site operator and a gateway can be
exercised end to end on one laptop. Faults are injected through `/admin/*`
(see `fakeadmin`).

Request life: parse (plain `json.loads`, no model validation: this is a benchmark
backend) -> pick the model's engine (404 if none) -> take a slot or wait in the queue
(429 past `max_queue`) -> hold it for a sampled service time -> answer. A client that
goes away leaves the queue or its slot at once and is counted in `cancelled`; this
needs the runner's `handler_cancellation=True`, which `start_fake_server` sets.
"""

from __future__ import annotations

import asyncio
import enum
import json
import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from gridroute.fakeserver import openai_shapes as shapes
from gridroute.fakeserver.admin import routes as admin_routes
from gridroute.fakeserver.answer_log import REQUEST_ID_HEADER
from gridroute.fakeserver.served_model import FakeEngine
from gridroute.fakeserver.servicetime import Timing
from gridroute.fakeserver.settings import FakeServerConfig
from gridroute.fakeserver.slots import QueueFull
from gridroute.fakeserver.state import STATE, ServerState

__all__ = ["STATE", "FakeServerConfig", "RunningFakeServer", "create_app", "start_fake_server"]

SERVER_HEADER = "x-fake-server"
_SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}


class Kind(enum.Enum):
    """Which OpenAI endpoint a request came in on."""

    CHAT = "chat"
    COMPLETION = "completion"
    EMBEDDING = "embedding"
    RESPONSE = "response"


_MAX_TOKEN_KEYS = {
    Kind.CHAT: ("max_completion_tokens", "max_tokens"),
    Kind.COMPLETION: ("max_tokens",),
    Kind.RESPONSE: ("max_output_tokens",),
    Kind.EMBEDDING: (),
}


def _json(status: int, body: bytes, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=body, content_type="application/json", headers=headers)


def _invalid(message: str, code: str, param: str | None = None) -> web.Response:
    return _json(400, shapes.error(message, "invalid_request_error", code, param))


def _sse(chunk: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _output(body: dict[str, Any], kind: Kind, default: int) -> tuple[int, str]:
    """(tokens to produce, finish_reason): a request cap means it stops for `length`."""
    for key in _MAX_TOKEN_KEYS[kind]:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value, "length"
    return (0, "stop") if kind is Kind.EMBEDDING else (default, "stop")


def _prompt(body: dict[str, Any], kind: Kind) -> Any:
    key = {Kind.CHAT: "messages", Kind.COMPLETION: "prompt"}.get(kind, "input")
    return body.get(key)


async def _generate(request: web.Request, kind: Kind) -> web.StreamResponse:
    st = request.app[STATE]
    if st.fail_status is not None:
        return st.failure_response()
    try:
        body = json.loads(await request.read())
    except ValueError as exc:
        return _invalid(f"request body is not valid JSON: {exc}", "invalid_json")
    if not isinstance(body, dict):
        return _invalid("request body must be a JSON object", "invalid_request")
    model = body.get("model") or st.default_model
    eng = st.engines.get(model) if isinstance(model, str) else None
    if eng is None:
        message = f"The model `{model}` does not exist."
        return _json(
            404, shapes.error(message, "invalid_request_error", "model_not_found", "model")
        )
    stream = body.get("stream") is True
    if stream and kind in (Kind.EMBEDDING, Kind.RESPONSE):
        return _invalid(
            f"the fake server does not stream {kind.value} requests", "invalid_request", "stream"
        )
    inputs = shapes.embedding_inputs(body.get("input")) if kind is Kind.EMBEDDING else None
    if kind is Kind.EMBEDDING and inputs is None:
        return _invalid("input must be a string or a non-empty list", "invalid_request", "input")

    loop = asyncio.get_running_loop()
    arrival = loop.time()
    pool = eng.pool
    if pool.full:
        eng.overshoot += 1
    try:
        await pool.acquire()
    except QueueFull:
        eng.rejected += 1
        retry = st.cfg.retry_after_s
        message = f"fake server {st.cfg.name!r}: queue for {model} is full"
        return _json(
            429,
            shapes.error(message, "rate_limit_error", "rate_limit_exceeded"),
            {"Retry-After": str(retry)} if retry else None,
        )
    except asyncio.CancelledError:
        eng.record_cancelled()
        raise
    try:
        tokens, finish = _output(body, kind, st.cfg.tokens)
        timing = st.timing.sample()
        if stream:
            return await _stream(request, eng, kind, body, tokens, finish, timing, arrival)
        try:
            hold_s = timing.total_s(tokens)
            if hold_s > 0:
                await asyncio.sleep(hold_s)
            if st.paused:
                await st.gate()
        except asyncio.CancelledError:
            eng.record_cancelled()
            raise
        prompt = shapes.estimate_tokens(_prompt(body, kind))
        now = loop.time()
        eng.record_done(
            finish, prompt, tokens, now - arrival - (hold_s - timing.first_token_s), now - arrival
        )
        rid, created = st.next_id(), int(time.time())
        if st.answers is not None:
            st.answers.began(request.headers.get(REQUEST_ID_HEADER))
        if kind is Kind.CHAT:
            cached = st.prefixes.serve(body.get("messages"))
            out = shapes.chat_completion(
                "chatcmpl-" + rid, created, model, tokens, prompt, finish, cached
            )
        elif kind is Kind.COMPLETION:
            out = shapes.completion("cmpl-" + rid, created, model, tokens, prompt, finish)
        elif kind is Kind.RESPONSE:
            out = shapes.response(rid, created, model, tokens, prompt)
        else:
            b64 = body.get("encoding_format") == "base64"
            out = shapes.embeddings(model, inputs or [], st.cfg.embedding_dim, b64)
        return _json(200, json.dumps(out).encode())
    finally:
        pool.release()


async def _stream(
    request: web.Request,
    eng: FakeEngine,
    kind: Kind,
    body: dict[str, Any],
    tokens: int,
    finish: str,
    timing: Timing,
    arrival: float,
) -> web.StreamResponse:
    """SSE: a role chunk (chat), one chunk per token at the engine's pace, then [DONE]."""
    st = request.app[STATE]
    loop = asyncio.get_running_loop()
    rid, created, model = st.next_id(), int(time.time()), eng.model
    chat = kind is Kind.CHAT
    rid = ("chatcmpl-" if chat else "cmpl-") + rid
    opts = body.get("stream_options")
    include_usage = isinstance(opts, dict) and opts.get("include_usage") is True
    resp = web.StreamResponse(headers=_SSE_HEADERS)
    ttft = 0.0
    try:
        if st.answers is not None:
            st.answers.began(request.headers.get(REQUEST_ID_HEADER))
        await resp.prepare(request)
        if chat:  # vLLM opens a chat stream with the role, before any token
            role = {"role": "assistant", "content": ""}
            await resp.write(_sse(shapes.chat_chunk(rid, created, model, role, None)))
        if timing.first_token_s > 0:
            await asyncio.sleep(timing.first_token_s)
        ttft = loop.time() - arrival

        def event(i: int) -> bytes:
            piece = shapes.token(i)
            if chat:
                return _sse(shapes.chat_chunk(rid, created, model, {"content": piece}, None))
            last = finish if i == tokens - 1 else None
            return _sse(shapes.completion_chunk(rid, created, model, piece, last))

        if timing.per_token_s > 0:
            for i in range(tokens):
                if i:
                    await asyncio.sleep(timing.per_token_s)
                if st.paused:
                    await st.gate()
                await resp.write(event(i))
        else:  # every token is ready at once: one write, still one SSE event per token
            if st.paused:
                await st.gate()
            await resp.write(b"".join(map(event, range(tokens))))
        prompt = shapes.estimate_tokens(_prompt(body, kind))
        tail = [_sse(shapes.chat_chunk(rid, created, model, {}, finish))] if chat else []
        if include_usage:
            obj = "chat.completion.chunk" if chat else "text_completion"
            tail.append(_sse(shapes.usage_chunk(rid, created, model, obj, prompt, tokens)))
        tail.append(b"data: [DONE]\n\n")
        await resp.write_eof(b"".join(tail))
    except asyncio.CancelledError:
        eng.record_cancelled()
        raise
    except ConnectionResetError:  # the client went away between two chunks
        eng.record_cancelled()
        return resp
    eng.record_done(finish, prompt, tokens, ttft, loop.time() - arrival)
    return resp


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, Kind.CHAT)


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generate(request, Kind.COMPLETION)


async def embeddings(request: web.Request) -> web.StreamResponse:
    return await _generate(request, Kind.EMBEDDING)


async def responses(request: web.Request) -> web.StreamResponse:
    return await _generate(request, Kind.RESPONSE)


async def models(request: web.Request) -> web.Response:
    st = request.app[STATE]
    if st.fail_status is not None:
        return st.failure_response(model_request=False)
    return web.json_response(shapes.models_list(list(st.engines), int(time.time())))


def create_app(cfg: FakeServerConfig) -> web.Application:
    """The fake server as an aiohttp app. Run it with `handler_cancellation=True` on the
    runner (as `start_fake_server` does) so client disconnects free slots at once."""
    app = web.Application()
    app[STATE] = ServerState(cfg)
    name = cfg.name

    async def stamp(_request: web.Request, response: web.StreamResponse) -> None:
        response.headers[SERVER_HEADER] = name

    app.on_response_prepare.append(stamp)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/v1/responses", responses)
    app.router.add_get("/v1/models", models)
    app.router.add_routes(admin_routes)
    return app


@dataclass
class RunningFakeServer:
    """A fake server listening on a socket; `async with` closes it."""

    app: web.Application
    runner: web.AppRunner
    host: str
    port: int

    @property
    def url(self) -> str:
        """Base URL without `/v1`, e.g. `http://127.0.0.1:40123`."""
        return f"http://{self.host}:{self.port}"

    @property
    def state(self) -> ServerState:
        """Live state (engines, counters, faults) for in-process tests."""
        return self.app[STATE]

    async def close(self) -> None:
        self.state.recover()  # let stalled handlers finish instead of waiting them out
        await self.runner.cleanup()
        if self.state.answers is not None:
            self.state.answers.close()

    async def __aenter__(self) -> RunningFakeServer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


async def start_fake_server(
    cfg: FakeServerConfig, host: str = "127.0.0.1", port: int = 0
) -> RunningFakeServer:
    """Start a fake server on `host:port` (0 picks a free port) in the running loop."""
    app = create_app(cfg)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=2048)
    await site.start()
    bound = runner.addresses[0][1]
    return RunningFakeServer(app, runner, host, bound)
