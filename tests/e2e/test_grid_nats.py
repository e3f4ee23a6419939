"""A whole local grid on the NATS transport: every site live at the gateway, and a
partitioned site's silence and return seen through NATS alone (operators poll nobody)."""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from gridroute.core.settings import AvailabilitySettings
from gridroute.grid.launcher import LocalGrid, http_json
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


def test_two_gateways_on_nats_split_a_sites_room_by_their_own_loads() -> None:
    """Each gateway publishes its own in-flight on NATS and sums the other's: with load
    at the site that no gateway sent, gateway 0 carrying 6 and gateway 1 carrying 2,
    their shares of the site's room are 6/8 and 2/8, and each counts only the outside
    load as external. Without reports each would read its part of all polled load
    (6/12 and 2/12), and without the other's report it would count that as external."""
    external, loads = 4, (6, 2)
    spec = GridSpec(
        sites=(LocalSite("hub", 16),),
        gateway_sites=("hub", "hub"),
        service_s=60.0,  # every request stays in flight while the shares are read
        interval_s=0.25,
        availability=AvailabilitySettings(external_load_tau_ms=1000),
        signals="nats",
    )
    with LocalGrid(spec) as grid, ThreadPoolExecutor(sum(loads)) as pool:
        # A grid of several gateways is started only once each has heard all of them
        # (else each reads the idle grid as its own and the first burst overshoots).
        assert [grid.status(g)["gateways_reporting"] for g in range(2)] == [2, 2]
        http_json(f"{grid.backend_urls['hub']}/admin/external", {"in_flight": external})
        grid.wait_for(lambda: _external_near(grid, external), 15.0, "external load learned")
        for gateway, n in enumerate(loads):
            for _ in range(n):
                pool.submit(_chat, grid.gateway_urls[gateway], spec.model)
        for gateway, n in enumerate(loads):
            grid.wait_for(lambda g=gateway, n=n: _own(grid, g) == n, 15.0, "requests in flight")

        def split() -> bool:
            shares = all(abs(_share(grid, g) - n / sum(loads)) <= 0.05 for g, n in enumerate(loads))
            return shares and _external_near(grid, external)

        grid.wait_for(split, 20.0, "shares split by the gateways' own loads")
        grid.stop()  # ends the held requests now


def _chat(url: str, model: str) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    with contextlib.suppress(OSError):  # cut when the grid stops: the test is over
        http_json(f"{url}/v1/chat/completions", body, timeout_s=120.0)


def _hub(grid: LocalGrid, gateway: int) -> dict[str, Any]:
    return grid.site_states(gateway)["hub"]


def _own(grid: LocalGrid, gateway: int) -> int:
    return int(_hub(grid, gateway)["in_flight"] or 0)


def _share(grid: LocalGrid, gateway: int) -> float:
    return float(_hub(grid, gateway)["share"] or 0.0)


def _external_near(grid: LocalGrid, external: int) -> bool:
    """Every gateway counts the site's outside load, and only it, as external."""
    return all(
        abs(grid.status(g)["external_in_flight"] - external) <= 1.0
        for g in range(len(grid.gateway_urls))
    )
