"""The fair share among gateways on `signals.transport: prometheus`, against a real
Prometheus with gridroute's deploy/prometheus config: a gateway reading site rows there
also reads every scraped gateway's own in-flight (`grid_route_site_in_flight`), so load
at a site that no gateway sent is external and the rest is split by the gateways' own
loads.

    fake hub (16 slots, 4 held from outside) <- operator <- gateway 0 (mesh, 6 in flight)
                          ^                                    ^
                          +------ prometheus (1 s scrapes) ----+---> gateway P (2 in flight)
"""

from __future__ import annotations

import contextlib
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from gridroute.core.settings import AvailabilitySettings
from gridroute.grid.launcher import LocalGrid, http_json
from gridroute.grid.layout import Addresses, GridSpec, LocalSite, gateway_config
from gridroute.grid.ports import free_ports
from tests.prometheus_grid import prometheus_config, until
from tests.prometheus_package import PrometheusBinaries
from tests.prometheus_server import RunningPrometheus

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]  # a first apt-get install

SPEC = GridSpec(
    sites=(LocalSite("hub", 16),),
    service_s=60.0,  # every request stays in flight while the shares are read
    interval_s=0.25,
    gateway_metrics=True,
    availability=AvailabilitySettings(external_load_tau_ms=1000),
)
EXTERNAL, MESH_LOAD, PROM_LOAD = 4, 6, 2
TIMEOUT_S = 30.0


def _start_prometheus_gateway(grid: LocalGrid, prom_url: str, metrics_port: int, tmp: Path) -> str:
    """A gateway at hub that reads rows and reports from Prometheus, scraped itself."""
    addrs = Addresses(grid.backend_urls, grid.operator_ports)
    cfg = gateway_config(SPEC, "hub", addrs, grid.certs, metrics_port)
    del cfg["operator"]
    cfg["signals"] = {
        "transport": "prometheus",
        "prometheus": {"url": prom_url, "poll_interval_s": 0.5, "timeout_s": 0.4,
                       "lookback_s": 5},
    }  # fmt: skip
    path = tmp / "gateway-prometheus.yaml"
    path.write_text(yaml.safe_dump(cfg))
    child = grid.procs.start("gateway-prometheus", ["gateway", "--config", str(path)])
    grid.procs.wait_announced([child], 30.0)
    return str(child.url)


def test_a_prometheus_gateway_splits_a_sites_room_by_the_gateways_own_loads(
    prometheus_binaries: PrometheusBinaries, tmp_path: Path
) -> None:
    (metrics_port,) = free_ports(1)
    with LocalGrid(SPEC, workdir=tmp_path / "grid") as grid:
        config = prometheus_config(grid, SPEC.gateway_sites, tmp_path / "prometheus")
        targets = tmp_path / "prometheus" / "targets" / "gateways.json"
        scraped = json.loads(targets.read_text())
        scraped.append({"targets": [f"127.0.0.1:{metrics_port}"], "labels": {"grid_site": "hub"}})
        targets.write_text(json.dumps(scraped))
        with (
            RunningPrometheus(prometheus_binaries, config, tmp_path / "prom-run") as prom,
            ThreadPoolExecutor(MESH_LOAD + PROM_LOAD) as pool,
        ):
            url = _start_prometheus_gateway(grid, prom.url, metrics_port, tmp_path)

            def hub() -> dict[str, Any]:
                with contextlib.suppress(OSError):
                    for row in http_json(url + "/grid/status")["sites"]:
                        if row["site"] == "hub":
                            return dict(row)
                return {}

            assert until(lambda: hub().get("live") == "live", TIMEOUT_S), hub()
            http_json(f"{grid.backend_urls['hub']}/admin/external", {"in_flight": EXTERNAL})
            for gateway, n in ((grid.gateway_url, MESH_LOAD), (url, PROM_LOAD)):
                for _ in range(n):
                    pool.submit(_chat, gateway, SPEC.model)

            def split() -> bool:
                status = http_json(url + "/grid/status")
                row = next(r for r in status["sites"] if r["site"] == "hub")
                own_share = PROM_LOAD / (MESH_LOAD + PROM_LOAD)
                return (
                    row["in_flight"] == PROM_LOAD
                    and abs((row["share"] or 0.0) - own_share) <= 0.05
                    and abs(status["external_in_flight"] - EXTERNAL) <= 1.0
                )

            # Without the gateways' counts it would read 2/12 and 0 external.
            assert until(split, TIMEOUT_S), (
                hub(),
                http_json(url + "/grid/status")["external_in_flight"],
            )
            grid.stop()  # ends the held requests now


def _chat(url: str, model: str) -> None:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    with contextlib.suppress(OSError):  # cut when the grid stops: the test is over
        http_json(f"{url}/v1/chat/completions", body, timeout_s=120.0)
