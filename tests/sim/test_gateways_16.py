"""Stateless scale-out (issue 22): sixteen gateways across three sites, as the replicas
of three sites' gateway Deployments are, each one identity under the fair-share rule.
examples/scenarios/gateways-16.yaml at 20 simulated seconds: under capacity no
overshoot, past capacity goodput >= 99 % of the slots (BENCHMARKS.md has the 44.6 s run)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from gridroute.core import Policy
from gridroute.sim.engine import SimRun
from gridroute.sim.scenario import Scenario, parse_scenario

SCENARIO = Path(__file__).resolve().parents[2] / "examples" / "scenarios" / "gateways-16.yaml"
DURATION_S = 20.0
SLOTS_PER_S = 320 / 0.2
"""The seed sites' 320 slots at 200 ms service: 1,600 requests/s."""


def scenario() -> Scenario:
    return parse_scenario({**yaml.safe_load(SCENARIO.read_text()), "duration_s": DURATION_S})


def test_sixteen_gateways_are_spread_over_the_three_sites() -> None:
    sc = scenario()
    assert len(sc.gateway_shares) == 16
    assert {s: sc.placement.count(s) for s in ("hub", "west", "east")} == {
        "hub": 6, "west": 5, "east": 5
    }  # fmt: skip


@pytest.mark.parametrize("clients", [256, 512], ids=["under-capacity", "past-capacity"])
def test_sixteen_gateways_meet_the_targets(clients: int) -> None:
    row = SimRun(scenario(), Policy.GRIDROUTE, clients).run().row
    assert row["failed"] == 0
    if clients == 256:  # 1,280 requests/s offered on 1,600/s of slots
        assert row["overshoot"] == 0
        assert row["requests"] >= 0.99 * row["ideal_requests"]
    else:
        assert row["requests"] >= 0.99 * SLOTS_PER_S * DURATION_S
        assert row["overshoot"] == 0  # measured: 0 (fair order admits in turn, no 429)
