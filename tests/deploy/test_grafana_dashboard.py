"""deploy/grafana/gridroute.json is a loadable Grafana dashboard with the panels the
issue names; tests/e2e/test_prometheus_grid.py runs every one of its queries live (the
"Signals over NATS" row: tests/e2e/test_prometheus_nats.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.prometheus_grid import NATS_ROW, dashboard_queries
from tests.promql_selectors import selectors

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "gridroute.json"


def _panels() -> list[dict[str, object]]:
    return [p for p in json.loads(DASHBOARD.read_text())["panels"] if p["type"] != "row"]


def test_every_panel_queries_the_chosen_prometheus_and_has_a_description() -> None:
    panels = _panels()
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))
    for p in panels:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["description"], p["title"]
        targets = p["targets"]
        assert isinstance(targets, list) and targets, p["title"]
        assert all(t["expr"] and t["legendFormat"] for t in targets), p["title"]


def test_the_dashboard_reads_share_rho_ceilings_decisions_shedding_polls_and_latency() -> None:
    read = {
        sel.split("{")[0]
        for p in _panels()
        for t in p["targets"]  # type: ignore[attr-defined]
        for sel in selectors(t["expr"])
    }
    for name in (
        "grid_route_decisions_total",
        "grid_route_site_rho",
        "grid_route_site_ceiling",
        "grid_route_site_ceiling_soft",
        "grid_route_site_ceiling_hard",
        "grid_route_selections_total",
        "grid_route_shedding",
        "grid_route_retries_total",
        "grid_route_request_duration_seconds_bucket",
        "grid_route_added_latency_seconds_bucket",
        "grid_signals_poll_total",
        "grid_signals_last_success_timestamp_seconds",
        "grid_signals_ingest_dropped_total",
        "grid_provider_scrape_total",
        "grid_route_prefix_affinity_total",
    ):
        assert name in read, name


def test_the_nats_row_reads_publishes_bytes_and_the_gateways_nats_reads() -> None:
    nats = [q for q in dashboard_queries() if q.row == NATS_ROW]
    read = {sel for q in nats for sel in selectors(q.expr)}
    assert read == {
        "grid_signals_published_total",
        "grid_signals_published_bytes_total",
        'grid_signals_poll_total{target="nats"}',
    }
    # The mesh panels read nothing only a NATS grid exports (the mesh e2e test runs them).
    mesh = {sel for q in dashboard_queries() if q.row != NATS_ROW for sel in selectors(q.expr)}
    assert not {s for s in mesh if "published" in s or 'target="nats"' in s}


def test_selectors_skip_functions_grouping_and_ranges() -> None:
    expr = (
        'sum by (site) (rate(a_total{reason=~"x|y"}[1m])) / ignoring (site) group_left '
        "sum(rate(a_total[5m])) and on (job) b > 0 unless time() - c:rec offset 5m"
    )
    assert selectors(expr) == ['a_total{reason=~"x|y"}', "a_total", "b", "c:rec"]
