"""Fair admission on a real gateway (sockets on 127.0.0.1): a starved client is served.

Two "hog" clients each send their next request the moment their last one is answered,
on a site with two slots; a third client that honours Retry-After would, first come
first served, always arrive while both slots are busy and be refused every time. In
fair order its request waits for the next freed slot, which goes to it (never served)
rather than to a hog's next request (just served)."""

from __future__ import annotations

import asyncio
import contextlib
import json

import aiohttp
import pytest

from tests.gateway.harness import MODEL, Grid, fake, run, running_grid

pytestmark = pytest.mark.usefixtures("each_listener")  # both API listeners

BODY = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
SLOTS = 2


def settings(fair: bool) -> dict[str, object]:
    return {
        "shedding": True,
        "fair_order": fair,
        "ceiling_floor": 1.0,
        "retry_after_min_s": 1,
        "retry_after_max_s": 1,
    }


async def post(http: aiohttp.ClientSession, g: Grid, key: str) -> tuple[int, str | None]:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    async with http.post(g.url + "/v1/chat/completions", data=BODY, headers=headers) as r:
        await r.read()
        return r.status, r.headers.get("Retry-After")


async def starved_client_served(fair: bool) -> tuple[int, list[str | None]]:
    """(answers the third client got in 3 tries, its Retry-After values)."""
    async with running_grid(
        {"a": fake("a", service_s=0.3, slots=SLOTS)}, availability=settings(fair)
    ) as g:
        stop = asyncio.Event()

        async def feed() -> None:  # the site's load as an operator would report it
            while not stop.is_set():
                g.feed({"a": (float(g.in_flight()), 0.0, float(SLOTS))})
                await asyncio.sleep(0.05)

        async def hog(http: aiohttp.ClientSession, key: str) -> None:
            while not stop.is_set():
                await post(http, g, key)

        async with aiohttp.ClientSession() as http:
            feeder = asyncio.create_task(feed())
            await asyncio.sleep(0.1)
            hogs = [asyncio.create_task(hog(http, f"hog-{i}")) for i in range(SLOTS)]
            await asyncio.sleep(0.5)  # the hogs hold both slots
            served, waits = 0, []
            for _ in range(3):
                status, retry = await post(http, g, "patient")
                if status == 200:
                    served += 1
                    break
                waits.append(retry)
                await asyncio.sleep(float(retry or 1))
            stop.set()
            for task in (*hogs, feeder):
                with contextlib.suppress(Exception):
                    await task
        return served, waits


def test_in_fair_order_a_client_that_would_starve_is_served() -> None:
    async def scenario() -> None:
        served, _ = await starved_client_served(fair=True)
        assert served == 1

    run(scenario)


def test_refusals_carry_the_configured_retry_after() -> None:
    async def scenario() -> None:
        _, waits = await starved_client_served(fair=False)
        assert waits and all(w == "1" for w in waits)

    run(scenario)
