"""One NATS connection that never holds its caller longer than the first attempt.

`nats.connect` with reconnects enabled (we reconnect without end, so a cluster fails
over) does not return until a server accepts it: against a server that is down, or
one that refuses the client's certificate (`Authorization Violation`), it loops
forever. Awaited inline, that would freeze an operator's scrape round (it publishes
after each scrape) or a gateway's signals loop (a read would neither succeed nor
count as failed). So the attempt runs in the background: a caller waits for it at
most until `connect_timeout_s` after it began, and after that a server that is not
there is reported at once (`NotConnected`) while the client keeps trying.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from gridroute.relay.nats_link import NatsLink, connect_options


class NotConnected(ConnectionError):
    """No NATS server has accepted this client (yet)."""


class NatsConnection:
    """The client of one process; `get()` returns it once connected."""

    def __init__(self, link: NatsLink, name: str, **callbacks: Any) -> None:
        self.link = link
        self.name = name
        self._callbacks = callbacks
        self._nc: Any = None
        self._task: asyncio.Task[None] | None = None
        self._first_deadline = 0.0

    async def get(self) -> Any:
        """The connected client, or `NotConnected`; waits only for the first attempt."""
        if self._task is None:
            from nats.aio.client import Client  # the optional transport

            self._nc = Client()
            self._task = asyncio.create_task(
                self._nc.connect(**connect_options(self.link, self.name), **self._callbacks),
                name=f"nats-connect-{self.name}",
            )
            self._first_deadline = time.monotonic() + self.link.connect_timeout_s
        if not self._task.done():
            wait_s = self._first_deadline - time.monotonic()
            if wait_s > 0:
                await asyncio.wait({self._task}, timeout=wait_s)
            if not self._task.done():
                raise NotConnected(f"no nats server accepted {self.name} yet")
        if self._task.exception() is not None:  # a config error: try again next time
            exc = self._task.exception()
            await self.close()
            raise NotConnected(f"nats connect failed: {exc}") from exc
        return self._nc

    @property
    def client(self) -> Any:
        """The client when connected once, else None (for flushes and closes)."""
        if self._task is not None and self._task.done() and self._task.exception() is None:
            return self._nc
        return None

    async def close(self) -> None:
        task, nc = self._task, self._nc
        self._task = self._nc = None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if nc is not None:
            with contextlib.suppress(Exception):
                await nc.close()
