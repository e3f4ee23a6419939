"""The operator's peer polls on a thread of their own, so local reads never wait on them.

A gateway reads every site's load from its local operator, over the same listener
and event loop that also ran the operator's polls of every peer: TLS handshakes,
reading and decoding each peer's rows. Under load (a large or slow peer set, a
handshake storm after a partition) that work filled the loop, and the gateway's own
read of `/signals` queued behind it until it timed out: in wave 1, all 40 sites, the
local one included, went unmeasured. Here the peer rounds run on a second event loop
in a daemon thread; the main loop keeps the listener (the gateways' reads, peers'
reads of us), the scrapes and the store. A completed poll hands its decoded rows back
to the main loop (`PeerRounds.deliver`), a cheap step, so the store has one owner and
needs no lock.

Python runs one thread at a time, but it switches between them every few
milliseconds (`sys.getswitchinterval`) and at every blocking call, so CPU-bound peer
work delays a local read by slices of that size, never by a whole round of it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


class Mailbox:
    """Changes handed from the peer thread to the main loop, run there in order.

    One wake-up of the main loop per batch, not per change: a round of 59 peers that
    complete together costs one `call_soon_threadsafe` (a write to the loop's self-pipe
    and a wake-up), not 59.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._lock = threading.Lock()
        self._pending: list[Callable[[], None]] = []

    def deliver(self, change: Callable[[], None]) -> None:
        with self._lock:
            self._pending.append(change)
            first = len(self._pending) == 1
        if first:
            self._loop.call_soon_threadsafe(self._drain)

    def _drain(self) -> None:
        with self._lock:
            changes, self._pending = self._pending, []
        for change in changes:
            try:
                change()
            except Exception:  # one bad change must not lose the others
                log.exception("peer rows could not be stored")


class PeerThread:
    """An event loop on a daemon thread; `run(coro)` awaits `coro` run there."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        loop = asyncio.new_event_loop()
        started = threading.Event()

        def main() -> None:
            asyncio.set_event_loop(loop)
            loop.call_soon(started.set)
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=main, name=self.name, daemon=True)
        self._thread.start()
        started.wait()

    async def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run `coro` on the peer loop and await its result here (cancelling it there
        when this await is cancelled)."""
        assert self._loop is not None, "PeerThread.start() first"
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self._loop))

    async def stop(self) -> None:
        """Stop the loop and join the thread (every task on it must be done)."""
        loop, thread = self._loop, self._thread
        self._loop = self._thread = None
        if loop is None or thread is None:
            return
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join)
