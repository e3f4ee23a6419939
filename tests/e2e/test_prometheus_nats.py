"""The Grafana dashboard's NATS row against a local grid on `signals.transport: nats`,
scraped by a real Prometheus with deploy/prometheus (the mesh panels are
tests/e2e/test_prometheus_grid.py).

Every query of the row returns series; publishes and reads are `ok` while the server
runs, and with the server stopped the same panel shows the operators' failed publishes
and the gateway's unreachable reads, then `ok` again once it is back.

    fake x2 <- operator x2 --publish--> nats-server --subscribe--> gateway
                   ^                                                  ^
                   +------- prometheus (1 s scrape, 1 s rules) -------+
"""

from __future__ import annotations

import json

import pytest

from gridroute.grid.launcher import LocalGrid
from gridroute.grid.layout import GridSpec, LocalSite
from gridroute.grid.nats_server import nats_server_binary
from tests.prometheus_grid import (
    NATS_ROW,
    RATE_INTERVAL,
    dashboard_queries,
    prometheus_config,
    until,
    without_series,
)
from tests.prometheus_package import PrometheusBinaries
from tests.prometheus_server import RunningPrometheus

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.timeout(900),  # a first apt-get install of prometheus
    pytest.mark.skipif(nats_server_binary() is None, reason="nats-server not installed"),
]

SPEC = GridSpec(
    sites=(LocalSite("hub", 4), LocalSite("west", 4)),
    service_s=0.05,
    signals="nats",
    gateway_metrics=True,
)
DATA_TIMEOUT_S = 30.0
PUBLISHED = f"sum by (result) (rate(grid_signals_published_total[{RATE_INTERVAL}])) > 0"
READ = f'sum by (result) (rate(grid_signals_poll_total{{target="nats"}}[{RATE_INTERVAL}])) > 0'


def _results(prom: RunningPrometheus, expr: str) -> set[str]:
    return {row["metric"].get("result", "") for row in prom.query(expr)}


def test_the_nats_panels_show_publishes_reads_and_a_lost_server(
    prometheus_binaries: PrometheusBinaries, tmp_path_factory: pytest.TempPathFactory
) -> None:
    panel = [q for q in dashboard_queries() if q.row == NATS_ROW]
    assert len(panel) >= 3
    tmp = tmp_path_factory.mktemp("prometheus-nats")
    with LocalGrid(SPEC, workdir=tmp / "grid") as grid:
        assert grid.nats is not None
        config = prometheus_config(grid, SPEC.gateway_sites, tmp / "prometheus")
        with RunningPrometheus(prometheus_binaries, config, tmp / "prom-run") as prom:
            want = {q.expr: q.title for q in panel}
            missing = without_series(prom.query, want, DATA_TIMEOUT_S)
            assert missing == {}, f"no series for: {json.dumps(missing, indent=1)}"
            assert until(lambda: _results(prom, PUBLISHED) == {"ok"}, DATA_TIMEOUT_S)
            assert until(lambda: _results(prom, READ) == {"ok"}, DATA_TIMEOUT_S)

            # The server goes away: publishes fail (disconnected or error) and the
            # gateway's reads are unreachable, on the same panel.
            grid.nats.stop()
            try:
                failing = lambda: bool(_results(prom, PUBLISHED) - {"ok"})  # noqa: E731
                assert until(failing, DATA_TIMEOUT_S), prom.query(PUBLISHED)
                unreachable = lambda: "unreachable" in _results(prom, READ)  # noqa: E731
                assert until(unreachable, DATA_TIMEOUT_S), prom.query(READ)
            finally:
                grid.nats.start()
            back = lambda: "ok" in _results(prom, PUBLISHED) and "ok" in _results(prom, READ)  # noqa: E731
            assert until(back, DATA_TIMEOUT_S), (prom.query(PUBLISHED), prom.query(READ))
