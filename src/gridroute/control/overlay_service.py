"""`gridroute control`: render the routing overlay continuously, write it, serve it.

Why a control-plane process and not a role of the operator: the operator relays
signals for its site and must stay simple and independent of routing policy (it may
not import control/, by contract); the overlay is fleet policy (drains, locality,
pickers) that one service owns and every gateway reads. It uses the operator's
signals as any consumer does, through `relay/`.

Every `interval_s` it re-reads the input file (a broken edit is logged and the last
good input kept), polls the operator's `/signals` when the input names one, renders,
and bumps the revision only when the semantic digest changed. A change is written
atomically (temporary file in the same directory, fsync, rename) and served at
`GET /overlay` with an ETag, so gateways that poll get a 304 while nothing changed.
`GET /stats` says how many overlay requests it served: the demos read it to show
that requests to the gateway cause none.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from aiohttp import web

from gridroute.clock import wall
from gridroute.config import ConfigError
from gridroute.control.atomicfile import write_atomic
from gridroute.control.overlay import Reading, RenderInput, load_input, next_revision, render
from gridroute.relay.poller import PollMetrics, SignalsClient
from gridroute.wire.overlay import Overlay, digest, dumps

log = logging.getLogger("gridroute.control")


class OverlayService:
    """The renderer loop and what it last published."""

    def __init__(
        self,
        input_path: Path,
        out: Path | None = None,
        interval_s: float = 1.0,
        clock: Callable[[], float] = wall,
    ) -> None:
        self.input_path = input_path
        self.out = out
        self.interval_s = interval_s
        self.clock = clock
        self.overlay: Overlay | None = None
        self.body = b""
        self.etag = ""
        self.served = 0
        """GET /overlay answered (200 or 304)."""
        self.renders = 0
        self.input: RenderInput | None = None
        self._signals: SignalsClient | None = None
        self._signals_url: str | None = None
        if out is not None and out.exists():
            # Continue the revision sequence of what is already published.
            from gridroute.wire.overlay import parse_overlay

            try:
                self.overlay = parse_overlay(out.read_bytes(), str(out))
            except ConfigError:
                self.overlay = None

    async def _readings(self, inp: RenderInput) -> dict[str, Reading] | None:
        if inp.signals is None:
            return None
        url = inp.signals.url.rstrip("/") + "/signals"
        if self._signals is None or self._signals_url != url:
            if self._signals is not None:
                await self._signals.close()
            self._signals = SignalsClient("control", url, metrics=PollMetrics())
            self._signals_url = url
        outcome = await self._signals.poll()
        readings: dict[str, Reading] = {}
        if outcome.decoded is not None:
            for s in outcome.decoded.samples:
                had = readings.get(s.key)
                if had is None or (had.sampled_at or 0.0) <= s.at:
                    readings[s.key] = Reading(s.at, s.ready is None or s.ready >= 1.0)
        return readings

    async def step(self) -> bool:
        """One render; True when a new revision was published."""
        try:
            self.input = load_input(self.input_path)
        except ConfigError as exc:
            log.error("control: input refused, keeping the last good one:\n%s", exc)
        inp = self.input
        if inp is None:
            return False
        readings = await self._readings(inp)
        rendered = render(inp, 0, readings, self.clock())
        self.renders += 1
        new = next_revision(self.overlay, rendered)
        if self.overlay is not None and new.revision == self.overlay.revision and self.body:
            return False
        self.overlay = new
        text = dumps(new)
        self.body = text.encode()
        self.etag = f'"{new.revision}-{digest(new)[:16]}"'
        if self.out is not None:
            write_atomic(self.out, text)
        log.warning("control: overlay revision %d published", new.revision)
        return True

    async def run(self) -> None:
        while True:
            await self.step()
            await asyncio.sleep(self.interval_s)

    async def close(self) -> None:
        if self._signals is not None:
            await self._signals.close()

    def app(self) -> web.Application:
        async def overlay(request: web.Request) -> web.Response:
            self.served += 1
            if not self.body:
                return web.json_response({"error": "no overlay rendered yet"}, status=503)
            if request.headers.get("If-None-Match") == self.etag:
                return web.Response(status=304, headers={"ETag": self.etag})
            return web.Response(
                body=self.body, content_type="application/json", headers={"ETag": self.etag}
            )

        async def stats(_: web.Request) -> web.Response:
            rev = None if self.overlay is None else self.overlay.revision
            return web.json_response(
                {"overlay_requests": self.served, "revision": rev, "renders": self.renders}
            )

        app = web.Application()
        app.router.add_get("/overlay", overlay)
        app.router.add_get("/stats", stats)
        return app


async def serve(service: OverlayService, host: str, port: int | None) -> None:
    """Render once, then serve (when `port` is set) and render every interval until
    cancelled; prints `listening on URL` once bound."""
    import signal
    import sys

    await service.step()
    runner: web.AppRunner | None = None
    if port is not None:
        runner = web.AppRunner(service.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1]
        sys.stdout.write(f"listening on http://{host}:{bound}\n")
        sys.stdout.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    task = asyncio.create_task(service.run())
    try:
        await stop.wait()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await service.close()
        if runner is not None:
            await runner.cleanup()
