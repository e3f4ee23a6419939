"""What `gridroute sim run` writes: the table, the JSON document and the plot."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gridroute.cli import app

ROW_KEYS = {
    "policy",
    "clients",
    "gateways",
    "shares",
    "peak_window_share",
    "requests",
    "ideal_requests",
    "overshoot",
    "shed",
    "failed",
    "latency_p50_s",
    "latency_p99_s",
    "queue_s",
    "clients_served_min",
    "clients_served_median",
    "clients_served_max",
    "jain",
}


def test_run_prints_table_and_writes_json_and_plot(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "name: tiny\nduration_s: 3\nclients: [64, 256]\ngateways: [0.7, 0.3]\n"
        "events:\n  - {at_s: 1, until_s: 2, partition: east}\n"
    )
    out, png = tmp_path / "out.json", tmp_path / "out.png"
    result = CliRunner().invoke(
        app, ["sim", "run", str(scenario), "--json", str(out), "--plot", str(png)]
    )
    assert result.exit_code == 0, result.output
    # The seed's layout: each site with its capacity share in the header.
    for header in ("hub, 0.40", "west, 0.40", "east, 0.20", "overshoot", "Jain"):
        assert header in result.output
    assert "partition east 1-2" in result.output

    doc = json.loads(out.read_text())
    assert doc["scenario"]["name"] == "tiny"
    assert doc["scenario"]["gateways"] == [0.7, 0.3]
    rows = doc["rows"]
    assert [(r["clients"], r["policy"]) for r in rows] == [
        (c, p) for c in (64, 256) for p in ("first", "saturation", "gridroute")
    ]
    for row in rows:
        assert set(row) >= ROW_KEYS
        assert row["gateways"] == 2
        assert set(row["shares"]) == {"hub", "west", "east"}
        assert abs(sum(row["shares"].values()) - 1.0) < 1e-3

    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_duration_override(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("clients: 64\npolicies: [gridroute]\n")
    out = tmp_path / "o.json"
    result = CliRunner().invoke(
        app, ["sim", "run", str(scenario), "--duration", "2", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.read_text())["rows"]
    assert row["ideal_requests"] == 64 * 5 * 2
