"""`gridroute fake-server`: run one fake model server until SIGTERM or SIGINT.

With `--port 0` the OS picks a free port; the server then prints exactly one line,
`listening on http://HOST:PORT`, and flushes it, so tests and the demo launcher can read
the address from the child's stdout. Defaults come from `FakeServerConfig`. Importing
this module stays cheap (no aiohttp) so every other CLI verb starts fast.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Coroutine
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from gridroute.fakeserver.settings import Distribution, FakeServerConfig

_D = FakeServerConfig()


def run_fast(main: Coroutine[Any, Any, None]) -> None:
    """Run `main` on uvloop when it is installed (the server is a benchmark backend)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency off Windows
        asyncio.run(main)
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


async def serve_until_signalled(cfg: FakeServerConfig, host: str, port: int) -> None:
    """Start, announce the address on stdout, and close cleanly on SIGTERM/SIGINT."""
    from gridroute.fakeserver.server import start_fake_server

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = await start_fake_server(cfg, host, port)
    sys.stdout.write(f"listening on {server.url}\n")
    sys.stdout.flush()
    try:
        await stop.wait()
    finally:
        await server.close()


def fake_server(
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port; 0 picks a free one.")] = 0,
    slots: Annotated[int, typer.Option(help="Concurrent requests per model.")] = _D.slots,
    service_ms: Annotated[
        float, typer.Option(help="Mean service time (time to first token with --per-token-ms).")
    ] = _D.service_s * 1000,
    model: Annotated[
        list[str] | None, typer.Option(help="Model name served; repeat for several.")
    ] = None,
    name: Annotated[str, typer.Option(help="Label echoed in the x-fake-server header.")] = _D.name,
    per_token_ms: Annotated[
        float | None, typer.Option(help="Milliseconds per output token (stream pace).")
    ] = None,
    tokens: Annotated[
        int, typer.Option(help="Output tokens unless max_tokens is set.")
    ] = _D.tokens,
    distribution: Annotated[
        str, typer.Option(help="constant | exponential | lognormal.")
    ] = _D.distribution,
    sigma: Annotated[float, typer.Option(help="Lognormal shape.")] = _D.sigma,
    seed: Annotated[int, typer.Option(help="Service-time random seed.")] = _D.seed,
    max_queue: Annotated[
        int | None, typer.Option(help="Queue bound per model; past it answer 429.")
    ] = None,
    answer_log: Annotated[
        str | None,
        typer.Option(help="File that gets a line per 200 answer begun (x-request-id, time)."),
    ] = None,
) -> None:
    """Run a fake OpenAI-compatible model server that exposes vLLM's /metrics."""
    dist: Distribution = distribution  # type: ignore[assignment]  # validated just below
    try:
        cfg = FakeServerConfig(
            models=model or _D.models,
            slots=slots,
            service_s=service_ms / 1000,
            distribution=dist,
            sigma=sigma,
            per_token_s=None if per_token_ms is None else per_token_ms / 1000,
            tokens=tokens,
            seed=seed,
            max_queue=max_queue,
            name=name,
            answer_log=answer_log,
        )
    except ValidationError as exc:
        raise typer.BadParameter(str(exc)) from exc
    run_fast(serve_until_signalled(cfg, host, port))
