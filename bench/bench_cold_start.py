"""A grid of four gateways hit by 512 clients the moment it is up: what queues at the
sites in the first seconds, with the local grid's wait for every gateway's report
(the default) and without it (as gateways that take traffic before they have heard
each other would).

    .venv/bin/python bench/bench_cold_start.py [--seconds 12]

Prints, per mode, the most requests queued at the sites in any one sample (every 0.5 s)
and the request-seconds queued over the span. 320 slots (hub 128, west 128, east 64),
5 s service, shedding and fair order on, each client its own API key.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from unittest import mock

import aiohttp

from gridroute.core import AvailabilitySettings
from gridroute.grid.launcher import LocalGrid
from gridroute.grid.layout import GridSpec
from gridroute.load.generator import run_load

CLIENTS = 512
GATEWAY_SITES = ("hub", "west", "east", "hub")


async def _sample(grid: LocalGrid, seconds: float) -> tuple[float, float]:
    """(most queued at once, request-seconds queued), read every half second."""
    peak = total = 0.0
    async with aiohttp.ClientSession() as http:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            now = 0.0
            for url in grid.backend_urls.values():
                async with http.get(f"{url}/admin/stats") as r:
                    now += float((await r.json()).get("waiting") or 0)
            peak, total = max(peak, now), total + now * 0.5
            await asyncio.sleep(0.5)
    return peak, total


async def _burst(grid: LocalGrid, seconds: float) -> tuple[float, float]:
    urls = grid.gateway_urls
    each = CLIENTS // len(urls)
    loads = [
        run_load(u, model=grid.spec.model, clients=each, duration_s=seconds, timeout_s=60.0,
                 identities=True, first_client=i * each)
        for i, u in enumerate(urls)
    ]  # fmt: skip
    sampled = asyncio.ensure_future(_sample(grid, seconds))
    await asyncio.gather(*loads)
    return await sampled


def run(wait: bool, seconds: float) -> tuple[float, float]:
    spec = GridSpec(
        service_s=5.0,
        gateway_sites=GATEWAY_SITES,
        availability=AvailabilitySettings(shedding=True),
    )
    heard = mock.patch.object(LocalGrid, "knows_every_gateway", lambda self, i=0: True)
    if wait:
        with LocalGrid(spec) as grid:
            return asyncio.run(_burst(grid, seconds))
    with heard, LocalGrid(spec) as grid:
        return asyncio.run(_burst(grid, seconds))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=12.0)
    args = ap.parse_args()
    print("| start | most queued at once | request-seconds queued |")
    print("|---|---:|---:|")
    for wait in (False, True):
        peak, total = run(wait, args.seconds)
        label = "wait for every gateway's report" if wait else "no wait"
        print(f"| {label} | {peak:.0f} | {total:.0f} |", flush=True)


if __name__ == "__main__":
    main()
