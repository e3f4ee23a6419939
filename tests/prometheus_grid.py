"""A local grid scraped by a real Prometheus with deploy/prometheus, and the Grafana
dashboard's queries to run against it (tests/e2e/test_prometheus_grid.py on the mesh,
tests/e2e/test_prometheus_nats.py on NATS).

The dashboard's rows say which grid feeds a panel: the panels of the `NATS_ROW` row read
series only an operator or gateway on `signals.transport: nats` exports, so the NATS
grid checks them and the mesh grid every other panel; between them, every panel.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gridroute.grid.launcher import LocalGrid

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "gridroute.json"
RATE_INTERVAL = "5s"
"""What Grafana's `$__rate_interval` stands for here: a few 1 s scrapes."""
NATS_ROW = "Signals over NATS"
"""The dashboard row whose panels only a grid on NATS feeds."""


@dataclass(frozen=True, slots=True)
class PanelQuery:
    row: str
    """Title of the row the panel sits under ("" before the first row)."""
    title: str
    expr: str
    """The target's PromQL, with `$__rate_interval` filled in."""


def dashboard_queries() -> list[PanelQuery]:
    """Every query of the dashboard, with its panel and row (in Grafana's flat panel
    list, a panel belongs to the row before it)."""
    row = ""
    out: list[PanelQuery] = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        if panel["type"] == "row":
            row = panel["title"]
            continue
        for target in panel.get("targets", []):
            expr = target["expr"].replace("$__rate_interval", RATE_INTERVAL)
            out.append(PanelQuery(row, panel["title"], expr))
    return out


def prometheus_config(grid: LocalGrid, gateway_sites: tuple[str, ...], out: Path) -> Path:
    """deploy/prometheus copied to `out`, pointed at the grid, scraping every second.

    Only the global intervals and the file_sd target files change; the jobs, TLS
    settings and rule files are the shipped ones."""
    shutil.copytree(DEPLOY, out)
    certs = out / "certs"
    certs.mkdir()
    shutil.copy(grid.certs / "ca.crt", certs / "ca.crt")
    shutil.copy(grid.certs / "hub" / "client.crt", certs / "prometheus.crt")
    shutil.copy(grid.certs / "hub" / "client.key", certs / "prometheus.key")
    config = yaml.safe_load((out / "prometheus.yml").read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    (out / "prometheus.yml").write_text(yaml.safe_dump(config))
    gateways = [
        {"targets": [url.removeprefix("http://")], "labels": {"grid_site": site}}
        for url, site in zip(grid.gateway_metrics_urls, gateway_sites, strict=True)
    ]
    operators = [
        {"targets": [url.removeprefix("https://")], "labels": {"grid_site": site}}
        for site, url in grid.operator_urls.items()
    ]
    (out / "targets" / "gateways.json").write_text(json.dumps(gateways))
    (out / "targets" / "operators.json").write_text(json.dumps(operators))
    return out / "prometheus.yml"


def until(ok: Callable[[], bool], timeout_s: float) -> bool:
    """Poll `ok` every half second until it holds (True) or `timeout_s` passes (False)."""
    deadline = time.monotonic() + timeout_s
    while not ok():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)
    return True


def without_series(
    query: Callable[[str], list[Any]], want: dict[str, str], timeout_s: float
) -> dict[str, str]:
    """Of `want` (expression -> what it shows), those still without a series after
    `timeout_s` (each is asked until it answers once); {} when every one has data."""
    missing = dict(want)

    def all_have_data() -> bool:
        for expr in list(missing):
            if query(expr):
                del missing[expr]
        return not missing

    until(all_have_data, timeout_s)
    return missing
