"""The simulator end to end, at reduced durations: issue 3's targets, disturbances,
determinism.

The full-length numbers live in BENCHMARKS.md and docs/simulator.md. These tests hold
gridroute to the issue's targets with their exact thresholds (>= 99 % of ideal, overshoot
<= 0.1 % of requests, every site's peak-window share within 0.03 of its capacity share,
goodput >= 98 % past capacity, ...) at 10-20 simulated seconds per row, so that a change
to the core that breaks one of them fails here in seconds.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gridroute.core import Policy
from gridroute.sim.engine import SimRun, ideal_requests, run_scenario, split
from gridroute.sim.report import document
from gridroute.sim.scenario import Scenario, parse_scenario


def rows(data: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    return {(r.row["policy"], r.row["clients"]): r.row for r in run_scenario(parse_scenario(data))}


@pytest.fixture(scope="module")
def seed10() -> dict[tuple[str, int], dict[str, Any]]:
    """The seed scenario cut to 10 s (about 1 s of CPU)."""
    return rows({"duration_s": 10})


def test_seed_orderings_at_256_clients(seed10: dict[tuple[str, int], dict[str, Any]]) -> None:
    first, sat, grid = (seed10[(p, 256)] for p in ("first", "saturation", "gridroute"))
    assert grid["requests"] >= sat["requests"] >= first["requests"]
    assert grid["overshoot"] * 20 < sat["overshoot"]
    assert grid["requests"] >= 0.99 * grid["ideal_requests"]


def test_first_caps_at_the_first_site(seed10: dict[tuple[str, int], dict[str, Any]]) -> None:
    row = seed10[("first", 256)]
    assert row["shares"] == {"hub": 1.0, "west": 0.0, "east": 0.0}
    # 128 slots x 5 requests/s x 10 s: the old path serves one site's worth.
    assert row["requests"] == 6400
    assert row["ideal_requests"] == 12800


CAPACITY_SHARE = {"hub": 0.4, "west": 0.4, "east": 0.2}
TARGET_S = 20.0
"""Long enough for the 10 s peak window to slide (at 10 s there is one window, the run)."""


def test_gridroute_meets_the_targets_at_every_load(
    seed10: dict[tuple[str, int], dict[str, Any]],
) -> None:
    """Issue 3, target 2, one gateway, 64 / 128 / 256 clients (10 s: share of the run)."""
    for clients in (64, 128, 256):
        row = seed10[("gridroute", clients)]
        assert row["requests"] >= 0.99 * row["ideal_requests"]
        assert row["overshoot"] <= 0.001 * row["requests"]
        for site, cap in CAPACITY_SHARE.items():
            assert abs(row["peak_window_shares"][site] - cap) <= 0.03
        assert row["failed"] == 0 and row["shed"] == 0


@pytest.mark.parametrize(
    "gateways", [1, 4, 8, [0.7, 0.1, 0.1, 0.1]], ids=["1", "4", "8", "0.7-0.1-0.1-0.1"]
)
def test_gridroute_meets_the_targets_with_several_gateways(gateways: int | list[float]) -> None:
    """Issue 3, target 2, at 256 clients (the load where the seed overshoots)."""
    sc = parse_scenario(
        {"duration_s": TARGET_S, "clients": 256, "gateways": gateways, "policies": ["gridroute"]}
    )
    row = SimRun(sc, Policy.GRIDROUTE, 256).run().row
    assert row["ideal_requests"] == 256 * 5 * TARGET_S
    assert row["requests"] >= 0.99 * row["ideal_requests"]
    assert row["overshoot"] <= 0.001 * row["requests"]
    for site, cap in CAPACITY_SHARE.items():
        assert abs(row["peak_window_shares"][site] - cap) <= 0.03, (site, row)
    assert row["failed"] == 0 and row["shed"] == 0


@pytest.mark.parametrize("fair", [False, True])
def test_past_capacity_with_shedding_refuses_the_excess(fair: bool) -> None:
    """Issue 3, target 3: 384 clients on 320 slots (1,600 requests/s), shedding on.

    Without fair order the excess gets 429 at once; in fair order (issue 16) it waits
    for its turn at most `fair_wait_ms`, which at 200 ms service is long enough for
    every turn to come, so the same goodput is reached with next to no refusal."""
    sc = parse_scenario(
        {
            "duration_s": TARGET_S,
            "clients": 384,
            "policies": ["gridroute"],
            "availability": {"shedding": True, "fair_order": fair},
        }
    )
    row = SimRun(sc, Policy.GRIDROUTE, 384).run().row
    assert row["requests"] >= 0.98 * 1600 * TARGET_S
    if not fair:
        assert row["shed"] > 0
    assert row["failed"] == 0
    # One gateway reads one sample of each site: nothing it admits finds the site full.
    assert row["overshoot"] == 0


@pytest.mark.parametrize("clients", [384, 512])
def test_admission_queue_means_no_overshoot_past_capacity(clients: int) -> None:
    row = rows(
        {
            "duration_s": TARGET_S,
            "clients": [clients],
            "policies": ["gridroute"],
            "availability": {"shedding": True, "max_queue_ms": 2000},
        }
    )[("gridroute", clients)]
    assert row["overshoot"] == 0
    assert row["failed"] == 0
    assert row["requests"] >= 0.98 * 1600 * TARGET_S


def test_requests_never_exceed_ideal(seed10: dict[tuple[str, int], dict[str, Any]]) -> None:
    for row in seed10.values():
        assert row["requests"] <= row["ideal_requests"]


def test_same_seed_same_rows_and_another_seed_differs() -> None:
    data = {
        "duration_s": 4,
        "clients": [256],
        "gateways": 2,
        "service": {"distribution": "exponential"},
    }
    one = json.dumps(document(parse_scenario(data), run_scenario(parse_scenario(data))))
    two = json.dumps(document(parse_scenario(data), run_scenario(parse_scenario(data))))
    assert one == two
    other = {**data, "seed": 2}
    three = json.dumps([r.row for r in run_scenario(parse_scenario(other))])
    assert three != json.dumps(json.loads(one)["rows"])


def test_partition_is_routed_around_and_returns() -> None:
    row = rows(
        {
            "duration_s": 22,
            "clients": [128],
            "gateways": 2,
            "policies": ["gridroute"],
            "events": [{"at_s": 5, "until_s": 15, "partition": "east"}],
        }
    )[("gridroute", 128)]
    assert row["failed"] == 0
    probes = row["events"]
    assert [p["gateway"] for p in probes] == [0, 1]  # hub and west; none sits at east
    for p in probes:
        # Judged silent once the newest sample (at most a scrape and a poll before the
        # cut) is older than the freshness window (5 s) ...
        assert 5.0 - 2 * 1.0 <= p["silent_after_s"] <= 5.0 + 2 * 1.0
        assert p["sent_after_silent"] == 0
        # ... and routed to again about two polls after it came back.
        assert p["live_again_after_s"] <= 3 * 1.0
        assert p["first_send_after_s"] is not None and p["first_send_after_s"] <= 3.2
    assert row["retried"] > 0  # requests sent before it was judged silent were retried
    # Five connect timeouts (2 s each) eject it: what was sent in those 2 s, not 5 s.
    assert all(p["sent_before_silent"] <= 20 for p in probes)


def test_gateway_inside_the_partition_keeps_to_its_own_site() -> None:
    sc = parse_scenario(
        {
            "duration_s": 20,
            "clients": [64],
            "gateways": 1,
            "gateway_sites": ["east"],
            "policies": ["gridroute"],
            "events": [{"at_s": 5, "until_s": 15, "partition": "east"}],
        }
    )
    result = SimRun(sc, Policy.GRIDROUTE, 64).run()
    # Requests it sent to hub or west before judging them silent time out, and their one
    # retry may pick the other unreachable site: those fail. Once both are judged silent,
    # everything stays at east (64 clients fit its 64 slots).
    assert 0 < result.row["failed"] < 64
    series = result.series
    inside = range(int(12 / series.bucket_s), int(15 / series.bucket_s))
    assert sum(series.completions[i][b] for i in (0, 1) for b in inside) == 0
    assert sum(series.completions[2][b] for b in inside) > 0


def test_site_failure_retries_what_was_in_service_and_ejects_the_site() -> None:
    """As the gateway does: a request whose backend dies before answering is retried once
    elsewhere, and the burst of lost connections ejects the site at once."""
    row = rows(
        {
            "duration_s": 20,
            "clients": [128],
            "policies": ["gridroute"],
            "events": [{"at_s": 5, "until_s": 12, "fail": "west"}],
        }
    )[("gridroute", 128)]
    # ~40 % of 128 requests were at west when it died: each retried on hub or east.
    assert row["failed"] == 0
    assert 30 <= row["retried"] <= 70
    (probe,) = row["events"]
    # Ejected at the instant it died; its one probation trial (5 s later, before the
    # signals judged it silent) is the only request sent there while it was dead.
    assert probe["sent_before_silent"] + probe["sent_after_silent"] <= 1
    assert probe["first_send_after_s"] is not None and probe["first_send_after_s"] <= 3.2


def test_client_step_and_operator_restart_run() -> None:
    sc = parse_scenario(
        {
            "duration_s": 12,
            "clients": 64,
            "policies": ["gridroute"],
            "events": [
                {"at_s": 4, "clients": 256},
                {"at_s": 6, "restart_operator": "hub"},
                {"at_s": 8, "clients": 32},
            ],
        }
    )
    row = run_scenario(sc)[0].row
    assert row["ideal_requests"] == (64 * 5 * 4 + 256 * 5 * 4 + 32 * 5 * 4)
    assert row["failed"] == 0
    assert row["requests"] >= 0.95 * row["ideal_requests"]


def test_split_and_ideal() -> None:
    assert sum(split(64, [0.7, 0.1, 0.1, 0.1])) == 64
    assert split(64, [0.7, 0.1, 0.1, 0.1])[0] == 45
    assert split(10, [0.25] * 4) == [3, 3, 2, 2]
    assert ideal_requests(Scenario(), 256) == round(256 / 0.2 * 44.6)
    assert ideal_requests(Scenario(), 512) == round(320 / 0.2 * 44.6)


def test_gateway_poll_interval_defaults_to_the_operators_and_fresher_reads_herd_less() -> None:
    """`gateway_poll_interval_s` unset is `poll_interval_s`; a gateway that reads its
    operator 4x as often herds less under the seed PR's rule at 256 clients (the detail
    docs/simulator.md measures against the seed's lab)."""
    base = {"duration_s": 10, "clients": 256, "policies": ["saturation"]}
    same = rows({**base, "gateway_poll_interval_s": 1.0})
    assert same == rows(base)
    fresh = rows({**base, "gateway_poll_interval_s": 0.25})[("saturation", 256)]
    stale = same[("saturation", 256)]
    assert fresh["requests"] > stale["requests"]  # seeds 1-4 at 10 s: +3 % to +14 %
    assert fresh["overshoot"] < stale["overshoot"]
