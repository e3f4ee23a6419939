"""The local grid as real processes: traffic spreads by capacity, a partitioned site stops
getting traffic once the gateway sees it silent, and gets it again after it returns."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gridroute.grid.launcher import LocalGrid, leftover_pids
from gridroute.grid.layout import GridSpec, LocalSite
from gridroute.load.background import BackgroundLoad

pytestmark = pytest.mark.e2e

SPEC = GridSpec(
    sites=(LocalSite("hub", 16), LocalSite("west", 16), LocalSite("east", 8)),
    service_s=0.2,
    distribution="exponential",
)
CLIENTS = 24  # 60 % of 40 slots
SAMPLE = 600
"""Requests counted for the share check (about 5 s of traffic on an idle machine; the
check waits for the count, not for a time, so a busy machine only makes it slower)."""
SHARE_TOLERANCE = 0.15
"""Absolute: a 600-request sample of a p2c draw that reacts to load swings by several
points."""


def _served_until(
    grid: LocalGrid, enough: Callable[[dict[str, int]], bool], what: str
) -> dict[str, int]:
    """Requests each site served from now until `enough(those counts)` holds."""
    before = grid.served()
    delta: dict[str, int] = {}

    def check() -> bool:
        nonlocal delta
        now = grid.served()
        delta = {site: now[site] - before[site] for site in now}
        return enough(delta)

    grid.wait_for(check, 60.0, what)
    return delta


def test_capacity_shares_partition_and_return(tmp_path: Path) -> None:
    workdir = tmp_path / "grid"
    with (
        LocalGrid(SPEC, workdir=workdir) as grid,
        BackgroundLoad(grid.gateway_url, SPEC.model, CLIENTS),
    ):
        # let the first rounds of requests land (every client has been answered once)
        _served_until(grid, lambda d: sum(d.values()) >= CLIENTS, "first requests served")
        served = _served_until(grid, lambda d: sum(d.values()) >= SAMPLE, f"{SAMPLE} served")
        total = sum(served.values())
        caps = {s.name: s.slots / SPEC.total_slots for s in SPEC.sites}
        off = {s: cap for s, cap in caps.items() if abs(served[s] / total - cap) > SHARE_TOLERANCE}
        # on failure, how the gateway chose (paths) and what it saw, to tell why
        assert not off, (served, grid.status()["selections"], grid.site_states())
        print(f"shares over {total}: {served}")

        grid.partition("east")
        waited = grid.wait_for(
            lambda: grid.site_states()["east"]["live"] == "silent", 15.0, "east seen silent"
        )
        # the others carry the load: 150 requests go by and none of them to east
        during = _served_until(grid, lambda d: d["hub"] + d["west"] >= 150, "others serving")
        assert during["east"] == 0, during
        refused = grid.status()["decisions"]["recent"].get("east", {})
        # passed over as silent (operators) or demoted (its health probes failed first)
        assert refused.get("silent", 0) + refused.get("demoted", 0) > 0, refused
        print(f"east seen silent {waited:.1f} s after the partition's drain")

        grid.restore("east")
        grid.wait_for(lambda: grid.site_states()["east"]["live"] == "live", 10.0, "east live")
        east0 = grid.served()["east"]
        grid.wait_for(lambda: grid.served()["east"] - east0 >= 20, 10.0, "east serving again")
    assert leftover_pids(workdir) == []
