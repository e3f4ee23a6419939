"""Who gets served past capacity: today (first come) beside fair order, in one run (issue 16).

    .venv/bin/python bench/bench_fairness.py [--quick] [--sim-only] [--gateways 1,4,4u]
        [--modes today,held,fair]

384 and 512 closed-loop clients on 320 slots (hub 128, west 128, east 64), 5 s service,
shedding on, every client honouring Retry-After, 1 and 4 gateways, and 4 gateways with
unequal demand (`4u`: 40/20/20/20 % of the clients); each client sticks to one
gateway. Modes: `today` is gridroute with `fair_order: false` (a 429 at once when there
is no room); `held` is fair order with budgets that follow holdings only
(`follow_demand: false`, the rule before issue 25); `fair` is the default (budgets
also follow demand between gateways). Printed per row: Jain's fairness index over the
clients' served counts (target >= 0.95), min / median / max served per client and
max/min (target <= 2), goodput as completions over what the slots could complete in the
measured span (target >= 0.99), request-seconds queued at the sites, and 429s.

Simulator: 10 s warm-up, 60 s measured, seeded; clients wait between half and all of
a Retry-After, as the live load generator's do. Live: the local grid (`grid.launcher`:
fake model servers, operators over mTLS, gateways) and the load generator, 10 s warm-up
then 60 s measured (`--quick`: 5 s and 25 s); queued request-seconds from each model
server's `/admin/stats` once a second.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from gridroute.core import AvailabilitySettings, Policy
from gridroute.grid.launcher import LocalGrid
from gridroute.grid.layout import GridSpec
from gridroute.load.generator import run_load
from gridroute.load.result import RequestOutcome
from gridroute.sim.engine import SimRun
from gridroute.sim.scenario import parse_scenario
from gridroute.sim.tally import client_figures

SLOTS = 320
SERVICE_S = 5.0
CLIENTS = (384, 512)
GATEWAYS: dict[str, tuple[tuple[str, ...], tuple[float, ...] | None]] = {
    "1": (("hub",), None),
    "4": (("hub", "west", "east", "hub"), None),
    "4u": (("hub", "west", "east", "hub"), (0.4, 0.2, 0.2, 0.2)),
}
"""Gateway sets: each gateway's site, and the clients' split (None: equal)."""


@dataclass(frozen=True, slots=True)
class Row:
    world: str
    gateways: str
    clients: int
    mode: str
    served: list[int]
    goodput: float
    queue_s: float
    shed: int


MODES = ("today", "held", "fair")


def settings(mode: str) -> AvailabilitySettings:
    return AvailabilitySettings(
        shedding=True, fair_order=mode != "today", follow_demand=mode == "fair"
    )


def sim_row(gateways: str, clients: int, mode: str) -> Row:
    sites, split = GATEWAYS[gateways]
    sc = parse_scenario(
        {
            "name": "fairness",
            # 60 s measured, offset by half a second from the waves of completions that
            # a constant service time makes (else the span holds 13 waves, not 12).
            "duration_s": 70.5,
            "warmup_s": 10.5,
            "service": {"mean_s": SERVICE_S},
            "retry_jitter": True,
            "gateways": list(split) if split else len(sites),
            "gateway_sites": list(sites),
            "clients": clients,
            "policies": ["gridroute"],
            "availability": settings(mode).model_dump(),
        }
    )
    run = SimRun(sc, Policy.GRIDROUTE, clients)
    row = run.run().row
    capacity = SLOTS / SERVICE_S * 60.0
    return Row(
        "sim",
        gateways,
        clients,
        mode,
        list(run.tally.served_by),
        row["requests"] / capacity,
        row["queue_s"],
        row["shed"],
    )


async def _queued_seconds(grid: LocalGrid, seconds: float) -> float:
    """Request-seconds waiting at the model servers, read once a second."""
    total = 0.0
    async with aiohttp.ClientSession() as http:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for url in grid.backend_urls.values():
                try:
                    async with http.get(f"{url}/admin/stats") as r:
                        total += float((await r.json()).get("waiting") or 0)
                except aiohttp.ClientError:
                    pass
            await asyncio.sleep(1.0)
    return total


async def _live_load(
    grid: LocalGrid,
    clients: int,
    warmup_s: float,
    measure_s: float,
    split: tuple[float, ...] | None = None,
) -> tuple[list[int], int, int, float]:
    """(served per client in the span, completions in it, 429s in it, queued seconds)."""
    urls = grid.gateway_urls
    if split is None:
        share = [clients // len(urls) + (i < clients % len(urls)) for i in range(len(urls))]
    else:
        share = [round(clients * f) for f in split]
        share[0] += clients - sum(share)
    firsts = [sum(share[:i]) for i in range(len(urls))]
    span = warmup_s + measure_s
    loads = [
        run_load(
            url,
            model=grid.spec.model,
            clients=n,
            duration_s=span,
            timeout_s=60.0,
            identities=True,
            first_client=first,
        )
        for url, n, first in zip(urls, share, firsts, strict=True)
    ]

    async def queued() -> float:
        await asyncio.sleep(warmup_s)
        return await _queued_seconds(grid, measure_s)

    waiting = asyncio.ensure_future(queued())
    results = await asyncio.gather(*loads)
    queue_s = await waiting
    served = [0] * clients
    done = shed = 0
    for result in results:
        for rec in result.records:
            inside = warmup_s <= rec.end_s <= span
            if rec.outcome is RequestOutcome.OK and inside:
                served[rec.client] += 1
                done += 1
            elif rec.outcome is RequestOutcome.SHED and inside:
                shed += 1
    return served, done, shed, queue_s


def live_row(gateways: str, clients: int, mode: str, warmup_s: float, measure_s: float) -> Row:
    sites, split = GATEWAYS[gateways]
    spec = GridSpec(
        service_s=SERVICE_S,
        gateway_sites=sites,
        availability=settings(mode),
    )
    with LocalGrid(spec) as grid:  # started on entry
        served, done, shed, queue_s = asyncio.run(
            _live_load(grid, clients, warmup_s, measure_s, split)
        )
    capacity = SLOTS / SERVICE_S * measure_s
    return Row("live", gateways, clients, mode, served, done / capacity, queue_s, shed)


def line(r: Row) -> str:
    fig = client_figures(r.served)
    lo, hi = fig["clients_served_min"], fig["clients_served_max"]
    ratio = "inf" if not lo else f"{hi / lo:.2f}"
    return (
        f"| {r.world} | {r.gateways} | {r.clients} | {r.mode} | {fig['jain']:.3f} "
        f"| {lo} / {statistics.median(r.served):g} / {hi} | {ratio} | {r.goodput:.3f} "
        f"| {r.queue_s:.0f} | {r.shed} |"
    )


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="live: 5 s warm-up, 25 s measured")
    ap.add_argument("--sim-only", action="store_true", help="skip the live grid")
    ap.add_argument("--live-clients", default=",".join(map(str, CLIENTS)))
    ap.add_argument("--gateways", default=",".join(GATEWAYS), help="e.g. 4,4u")
    ap.add_argument("--modes", default=",".join(MODES), help="e.g. held,fair")
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if any(m not in MODES for m in modes):
        ap.error(f"--modes: known {', '.join(MODES)}")
    warmup_s, measure_s = (5.0, 25.0) if args.quick else (10.0, 60.0)
    print(
        "| world | gateways | clients | mode | Jain | served min / median / max "
        "| max/min | goodput / slot capacity | queue-s at sites | 429s |"
    )
    print("|---|---:|---:|---|---:|---|---:|---:|---:|---:|")
    began = time.perf_counter()
    counts = [g for g in args.gateways.split(",") if g]
    unknown = [g for g in counts if g not in GATEWAYS]
    if unknown:
        ap.error(f"--gateways: unknown {unknown}, known: {', '.join(GATEWAYS)}")
    for gateways in counts:
        for clients in CLIENTS:
            for mode in modes:
                print(line(sim_row(gateways, clients, mode)), flush=True)
    if not args.sim_only:
        live = [int(c) for c in args.live_clients.split(",") if c]
        for gateways in counts:
            for clients in live:
                for mode in modes:
                    print(line(live_row(gateways, clients, mode, warmup_s, measure_s)), flush=True)
    print(f"\n{time.perf_counter() - began:.0f} s wall")


if __name__ == "__main__":
    main()
