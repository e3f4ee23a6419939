"""The simulated worlds of issue 11: external load, failing scrapes, half samples, lossy
links, clock skew, heterogeneous service and sizes (short runs, seeded)."""

from __future__ import annotations

import pytest

from gridroute.config import ConfigError as ScenarioError
from gridroute.core import Policy
from gridroute.sim.engine import SimRun as Run
from gridroute.sim.engine import ideal_requests
from gridroute.sim.scenario import parse_scenario
from gridroute.sim.tally import BUCKET_S

TWO = [
    {"name": "a", "slots": 100, "external": {"in_flight": 90}},
    {"name": "b", "slots": 100, "external": {"in_flight": 80}},
]


def _row(data: dict[str, object], policy: Policy, clients: int) -> dict[str, object]:
    sc = parse_scenario({"duration_s": 20, "warmup_s": 4, "policies": [policy.value], **data})
    return Run(sc, policy, clients).run().row


@pytest.mark.parametrize("reports", [True, False])
def test_external_load_with_the_admission_queue(reports: bool) -> None:
    """One gateway, 12 clients, 30 slots free of external load: with gateway reports it
    serves the ideal over both sites and never holds; without, it holds at times while
    both have free slots."""
    data = {"sites": TWO, "availability": {"max_queue_ms": 500}, "gateway_reports": reports}
    row = _row(data, Policy.GRIDROUTE, 12)
    ideal = row["ideal_requests"]
    assert ideal == 12 / 0.2 * 16
    if reports:
        assert row["requests"] >= 0.99 * ideal
        assert min(row["shares"].values()) >= 0.1, row["shares"]
        assert row["latency_p99_s"] <= 0.2 + 1e-9  # the service time: nothing held
    else:
        # The 0.05 floor share of 10-20 free slots: budgets of 0.5-1 request, granted
        # whole only part of the time (rounded per snapshot), so a request still holds
        # at times (p99 past the 0.2 s service). What the gateway held at a site since
        # the sample it refills at once (`SiteView.kept`), so it serves nearly the ideal
        # all the same (901 of 960 before that rule, 956 with it).
        assert row["latency_p99_s"] > 0.2
        assert row["requests"] >= 0.95 * ideal


def test_ideal_follows_external_steps() -> None:
    sc = parse_scenario(
        {
            "duration_s": 20,
            "clients": 320,
            "sites": [
                {"name": "a", "slots": 100, "external": {"steps": [{"at_s": 10, "in_flight": 50}]}},
                {"name": "b", "slots": 100},
            ],
        }
    )
    assert ideal_requests(sc, 320) == round(200 / 0.2 * 10 + 150 / 0.2 * 10)


def test_a_site_whose_metrics_fail_takes_nothing_once_silent() -> None:
    data = {
        "duration_s": 24,
        "warmup_s": 0,
        "clients": 128,
        "events": [{"metrics_down": "west", "at_s": 8, "until_s": 20}],
    }
    for policy in (Policy.SATURATION, Policy.GRIDROUTE):
        sc = parse_scenario({**data, "policies": [policy.value]})
        result = Run(sc, policy, 128).run()
        west = result.series.completions[result.series.sites.index("west")]
        # Last load at about 8 s, silent a 5 s window later; in service 0.2 s at most.
        quiet = west[int(15.5 / BUCKET_S) : int(20 / BUCKET_S)]
        assert sum(quiet) == 0, (policy, quiet)
        assert sum(west[int(22 / BUCKET_S) :]) > 0  # back after two new samples
        assert result.row["failed"] == 0


@pytest.mark.parametrize(
    "site",
    [
        {"half_samples": 0.33},
        {"link_loss": 0.33},
        {"clock_skew_s": 3.0},
        {"service": {"distribution": "lognormal", "mean_s": 0.3, "sigma": 1.0}},
    ],
    ids=["half", "loss", "skew", "service"],
)
def test_every_world_runs_and_keeps_gridroute_near_the_ideal(site: dict[str, object]) -> None:
    data = {
        "gateways": 2,
        "sites": [
            {"name": "hub", "slots": 128},
            {"name": "west", "slots": 128, **site},
            {"name": "east", "slots": 64},
        ],
        "request_sizes": {"sigma": 0.5},
    }
    row = _row(data, Policy.GRIDROUTE, 128)
    assert row["failed"] == 0
    assert row["requests"] >= 0.8 * row["ideal_requests"]


def test_clock_skew_changes_nothing_because_readers_rebase() -> None:
    base = {"gateways": 2, "clients": 128}
    skewed = {
        **base,
        "sites": [
            {"name": "hub", "slots": 128},
            {"name": "west", "slots": 128, "clock_skew_s": 3.0},
            {"name": "east", "slots": 64, "clock_skew_s": -2.0},
        ],
    }
    a = _row(base, Policy.GRIDROUTE, 128)
    b = _row(skewed, Policy.GRIDROUTE, 128)
    assert abs(a["requests"] - b["requests"]) <= 0.01 * a["requests"]


def test_world_fields_are_validated() -> None:
    bad = {"sites": [{"name": "a", "slots": 4, "external": {"steps": [
        {"at_s": 5, "in_flight": 1}, {"at_s": 2, "in_flight": 1}]}}]}  # fmt: skip
    with pytest.raises(ScenarioError, match="time order"):
        parse_scenario(bad)
    with pytest.raises(ScenarioError, match="link_loss"):
        parse_scenario({"sites": [{"name": "a", "slots": 4, "link_loss": 1.5}]})
    with pytest.raises(ScenarioError, match="unknown site"):
        parse_scenario({"events": [{"metrics_down": "nowhere", "at_s": 1, "until_s": 2}]})
