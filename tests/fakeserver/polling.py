"""Waiting for a server-side condition without sleeping a fixed time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


async def eventually(pred: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Poll `pred` every 10 ms until it holds; fail the test after `timeout_s`."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not pred():
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        await asyncio.sleep(0.01)
