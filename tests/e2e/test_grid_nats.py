"""A whole local grid on the NATS transport: every site live at the gateway, and a
partitioned site's silence and return seen through NATS alone (operators poll nobody)."""

from __future__ import annotations

import pytest

from gridroute.grid.launcher import LocalGrid
from gridroute.grid.layout import GridSpec, LocalSite
from gridroute.grid.nats_server import nats_server_binary

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(nats_server_binary() is None, reason="nats-server not installed"),
]


def test_a_grid_on_nats_routes_and_sees_a_partition() -> None:
    spec = GridSpec(
        sites=(LocalSite("hub", 8), LocalSite("west", 8), LocalSite("east", 8)),
        service_s=0.05,
        signals="nats",
    )
    with LocalGrid(spec) as grid:  # start() waits until every site is live at the gateway
        status = grid.status()
        assert status["poll"]["result"] == "ok" and status["poll"]["undelivered"] == []
        assert grid.nats is not None
        grid.partition("east", drain_s=0.2)
        grid.wait_for(lambda: grid.site_states()["east"]["live"] == "silent", 30.0, "east silent")
        grid.restore("east")
        grid.wait_for(grid.all_routable, 30.0, "east back")
