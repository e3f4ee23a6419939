"""The local grid scraped by a real Prometheus with gridroute's own deploy/prometheus
config and rules.

* Under capacity, one site's backend answers 503: the gateway retries those requests
  on the sites with room and they are answered there (retries counted, no 5xx). Then,
  past capacity, a shed and a partition: every PromQL expression of the Grafana
  dashboard and of the recording rules returns data, every selector an alert reads has
  data, every rule evaluates without error, and the partitioned site's silence alert
  goes pending. A metric renamed in the code breaks this test, not a panel in production.
* A second gateway with `signals.transport: prometheus` reads every site's load back from
  that Prometheus: all sites live and measured, the partitioned one silent, and back.

    fake x3 <- operator x3 (mTLS) <- gateway (metrics.listen) <- openai load
                   ^                      ^
                   +---- prometheus (1 s scrape, 1 s rule evaluation) ----+
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gridroute.grid.launcher import LocalGrid, http_json
from gridroute.grid.layout import Addresses, GridSpec, LocalSite, gateway_config
from gridroute.load.background import BackgroundLoad
from tests.prometheus_grid import (
    DEPLOY,
    NATS_ROW,
    dashboard_queries,
    prometheus_config,
    until,
    without_series,
)
from tests.prometheus_package import PrometheusBinaries
from tests.prometheus_server import RunningPrometheus
from tests.promql_selectors import selectors

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]  # a first apt-get install

SPEC = GridSpec(
    sites=(LocalSite("hub", 6), LocalSite("west", 6), LocalSite("east", 4)),
    service_s=0.2,
    distribution="exponential",
    gateway_metrics=True,
)
CLIENTS = 24
"""More clients than the grid's 16 slots, so the model is shed part of the time."""
LIGHT_CLIENTS = 6
"""Fewer clients than the slots left when any one site fails, so a retry finds room."""
DATA_TIMEOUT_S = 30.0


def rules() -> list[dict[str, Any]]:
    out = []
    for path in sorted((DEPLOY / "rules").glob("*.yml")):
        for group in yaml.safe_load(path.read_text())["groups"]:
            out.extend(group["rules"])
    return out


def checks() -> dict[str, str]:
    """What must return at least one series -> where it comes from."""
    want: dict[str, str] = {}
    for q in dashboard_queries():
        if q.row != NATS_ROW:  # tests/e2e/test_prometheus_nats.py runs those
            want[q.expr] = f"dashboard panel {q.title!r}"
    for rule in rules():
        if "record" in rule:
            want[rule["record"]] = f"recording rule {rule['record']}"
            continue
        for sel in selectors(rule["expr"]):
            want.setdefault(sel, f"alert {rule['alert']} (selector)")
    return want


class Stack:
    """The grid under load, and the Prometheus scraping it."""

    def __init__(self, grid: LocalGrid, prom: RunningPrometheus, workdir: Path) -> None:
        self.grid = grid
        self.prom = prom
        self.workdir = workdir
        self._load: BackgroundLoad | None = None

    def drive(self, clients: int) -> None:
        """From now on, `clients` closed-loop clients (replacing the ones before)."""
        self.stop_load()
        self._load = BackgroundLoad(self.grid.gateway_url, SPEC.model, clients).start()

    def stop_load(self) -> None:
        if self._load is not None:
            self._load.stop()
            self._load = None

    def value(self, expr: str) -> float:
        """The one value of `expr` (0 when it has no series)."""
        got = self.prom.query(expr)
        return float(got[0]["value"][1]) if got else 0.0


@pytest.fixture(scope="module")
def stack(
    prometheus_binaries: PrometheusBinaries, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("prometheus-grid")
    with LocalGrid(SPEC, workdir=tmp / "grid") as grid:
        config = prometheus_config(grid, SPEC.gateway_sites, tmp / "prometheus")
        with RunningPrometheus(prometheus_binaries, config, tmp / "prom-run") as prom:
            stack = Stack(grid, prom, tmp)
            stack.drive(LIGHT_CLIENTS)
            try:
                up = lambda: len(prom.query("up == 1")) == 1 + 2 * len(SPEC.sites)  # noqa: E731
                assert until(up, DATA_TIMEOUT_S), prom.query("up")
                yield stack
            finally:
                stack.stop_load()


def _prometheus_fed_gateway(stack: Stack) -> str:
    """A second gateway at hub that reads site load from the Prometheus, not the operator."""
    grid = stack.grid
    addrs = Addresses(grid.backend_urls, grid.operator_ports)
    cfg = gateway_config(SPEC, "hub", addrs, grid.certs)
    del cfg["operator"]
    cfg["signals"] = {
        "transport": "prometheus",
        "prometheus": {"url": stack.prom.url, "poll_interval_s": 0.5, "timeout_s": 0.4,
                       "lookback_s": 5},
    }  # fmt: skip
    path = stack.workdir / "gateway-prometheus.yaml"
    path.write_text(yaml.safe_dump(cfg))
    child = grid.procs.start("gateway-prometheus", ["gateway", "--config", str(path)])
    grid.procs.wait_announced([child], 30.0)
    return str(child.url)


def test_a_gateway_reads_site_load_from_prometheus(stack: Stack) -> None:
    grid = stack.grid
    url = _prometheus_fed_gateway(stack)

    def rows() -> dict[str, dict[str, Any]]:
        try:
            status = http_json(url + "/grid/status")
        except OSError:
            return {}
        return {r["site"]: r for r in status["sites"]}

    def all_live() -> bool:
        r = rows()
        return set(r) == {"hub", "west", "east"} and all(
            s["live"] == "live" and s["measured"] and s["capacity"] for s in r.values()
        )

    assert until(all_live, DATA_TIMEOUT_S), rows()
    status = http_json(url + "/grid/status")
    assert status["poll"]["result"] == "ok"
    assert {r["site"]: r["capacity"] for r in status["sites"]} == {
        s.name: s.slots for s in SPEC.sites
    }

    grid.partition("east", drain_s=0.5)
    try:
        east_silent = lambda: rows().get("east", {}).get("live") == "silent"  # noqa: E731
        assert until(east_silent, DATA_TIMEOUT_S), rows()
        assert rows()["hub"]["live"] == "live"
    finally:
        grid.restore("east")
    assert until(lambda: rows().get("east", {}).get("live") != "silent", DATA_TIMEOUT_S)


def test_every_dashboard_and_rule_expression_returns_data_from_a_live_grid(
    stack: Stack,
) -> None:
    want = checks()
    assert len(want) > 20
    grid, prom = stack.grid, stack.prom

    # Under capacity, west's backend answers 503 (its signals stay fresh): each such
    # request is retried on a site with room and answered there, so retries are counted
    # and no 5xx reaches a client.
    stack.drive(LIGHT_CLIENTS)
    five_xx = 'sum(grid_route_request_duration_seconds_count{status="5xx"})'
    west_retries = 'sum(grid_route_retries_total{site="west",reason="status_503"})'
    time.sleep(2.0)  # two scrapes: what came before is in Prometheus
    errors_before, retries_before = stack.value(five_xx), stack.value(west_retries)
    http_json(grid.backend_urls["west"] + "/admin/fail", {"status": 503})
    try:
        retried = lambda: stack.value(west_retries) >= retries_before + 3  # noqa: E731
        assert until(retried, DATA_TIMEOUT_S), prom.query("grid_route_retries_total")
    finally:
        http_json(grid.backend_urls["west"] + "/admin/recover", {})
    time.sleep(2.0)
    assert stack.value(five_xx) == errors_before, prom.query(
        "grid_route_request_duration_seconds_count"
    )

    # Past capacity (a shed), then a partition: silent decisions, failing polls.
    stack.drive(CLIENTS)
    grid.partition("east", drain_s=0.5)

    missing = without_series(prom.query, want, DATA_TIMEOUT_S)
    assert missing == {}, f"no series for: {json.dumps(missing, indent=1)}"

    # Every rule evaluates cleanly (a type error in a rule shows only here).
    groups = prom.api("rules")["groups"]
    bad = [
        (r["name"], r.get("lastError"))
        for g in groups
        for r in g["rules"]
        if r.get("health") != "ok"
    ]
    assert bad == []
    assert sum(len(g["rules"]) for g in groups) == len(rules())

    # The partitioned site's silence is seen by the alert (pending: `for` is 30 s).
    silent = 'ALERTS{alertname="GridSiteSilent",site="east"}'
    assert until(lambda: bool(prom.query(silent)), DATA_TIMEOUT_S), prom.query(
        "grid_route_site_silent_seconds"
    )
    assert not prom.query('ALERTS{alertname="GridSiteSilent",site="hub"}')
