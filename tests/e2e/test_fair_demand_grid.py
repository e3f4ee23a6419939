"""Budgets that follow demand between gateways, live (issue 25): two gateways at one
site, one with three times the other's clients, past capacity. Real operators, real
gateways, the load generator; on the mesh and on NATS (the demand rides in poll
headers and relay rows on one, in report message headers on the other).

Without demand following each gateway keeps about half the slots, so a client behind
the busy gateway is served about a third as often as one behind the quiet gateway
(measured with `follow_demand: false`: 0.38 on the mesh); with it, 0.84-1.04 on the
mesh and 0.85-1.21 on NATS (two runs each)."""

from __future__ import annotations

import asyncio
import statistics

import pytest

from gridroute.core.settings import AvailabilitySettings
from gridroute.grid.launcher import LocalGrid
from gridroute.grid.layout import GridSpec, LocalSite
from gridroute.grid.nats_server import nats_server_binary
from gridroute.load.generator import run_load
from gridroute.load.result import RequestOutcome

pytestmark = pytest.mark.e2e

CLIENTS = (48, 16)
WARMUP_S, MEASURE_S = 12.0, 16.0


async def _served(grid: LocalGrid, model: str) -> list[list[int]]:
    """Answers per client in the measured span, per gateway."""
    loads = [
        run_load(
            url,
            model=model,
            clients=n,
            duration_s=WARMUP_S + MEASURE_S,
            timeout_s=60.0,
            identities=True,
            first_client=sum(CLIENTS[:i]),
        )
        for i, (url, n) in enumerate(zip(grid.gateway_urls, CLIENTS, strict=True))
    ]
    out = []
    for i, result in enumerate(await asyncio.gather(*loads)):
        first = sum(CLIENTS[:i])
        served = [0] * CLIENTS[i]
        for rec in result.records:
            if rec.outcome is RequestOutcome.OK and rec.end_s >= WARMUP_S:
                served[rec.client - first] += 1
        out.append(served)
    return out


@pytest.mark.parametrize("signals", ["mesh", "nats"])
def test_a_client_behind_a_busy_gateway_is_served_about_as_often(signals: str) -> None:
    if signals == "nats" and nats_server_binary() is None:
        pytest.skip("nats-server not installed")
    spec = GridSpec(
        sites=(LocalSite("hub", 32),),
        gateway_sites=("hub", "hub"),
        service_s=1.0,
        interval_s=0.25,
        availability=AvailabilitySettings(shedding=True),  # follow_demand: the default
        signals=signals,
    )
    with LocalGrid(spec) as grid:
        busy, quiet = asyncio.run(_served(grid, spec.model))
    per_busy, per_quiet = statistics.mean(busy), statistics.mean(quiet)
    assert per_quiet > 0 and sum(busy) + sum(quiet) > 0
    # Past capacity the 32 slots go about 24 / 8 by clients, not 16 / 16 by gateways.
    assert per_busy / per_quiet >= 0.55, (busy, quiet)
