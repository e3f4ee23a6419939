"""Closed-loop load in a background thread, for code that is not itself async.

Tests and `gridroute demo --serve` want traffic flowing while they do something else
(poll a status page, drive a browser, partition a site) and then want it stopped. The
load generator is async and runs for a set time; this runs it on its own event loop
in a daemon thread and cancels it on `stop`, which also cancels its clients' requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from types import TracebackType

from gridroute.load.generator import run_load

FOREVER_S = 24 * 3600.0


class BackgroundLoad:
    """`clients` closed-loop clients sending to `base_url` until `stop`."""

    def __init__(self, base_url: str, model: str, clients: int) -> None:
        self.base_url = base_url
        self.model = model
        self.clients = clients
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, name="background-load", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._started.set()
            task = asyncio.create_task(
                run_load(
                    self.base_url, model=self.model, clients=self.clients, duration_s=FOREVER_S
                )
            )
            await self._stop.wait()
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

        asyncio.run(main())  # cancels every client task left on the way out

    def start(self) -> BackgroundLoad:
        self._thread.start()
        self._started.wait(timeout=10)
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop already closed
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout_s)

    def __enter__(self) -> BackgroundLoad:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
