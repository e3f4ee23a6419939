"""Who gets served past capacity (issue 16): per-client counts in the simulator."""

from __future__ import annotations

import pytest

from gridroute.core import Policy
from gridroute.sim.engine import SimRun
from gridroute.sim.scenario import parse_scenario
from gridroute.sim.tally import client_figures, jain


def past_capacity(fair: bool) -> dict[str, object]:
    """384 closed-loop clients on 320 slots, 5 s service, 60 s measured, shedding on."""
    sc = parse_scenario(
        {
            "duration_s": 70,
            "warmup_s": 10,
            "service": {"mean_s": 5.0},
            "clients": 384,
            "policies": ["gridroute"],
            "availability": {"shedding": True, "fair_order": fair},
        }
    )
    return SimRun(sc, Policy.GRIDROUTE, 384).run().row


def test_past_capacity_in_fair_order_every_client_is_served_about_equally() -> None:
    fair, today = past_capacity(True), past_capacity(False)
    assert fair["jain"] >= 0.95  # type: ignore[operator]
    assert fair["clients_served_max"] <= 2 * fair["clients_served_min"]  # type: ignore[operator]
    assert today["clients_served_min"] == 0  # first come, first served starves some
    # The goodput is kept: as many requests served, and no queue at the sites.
    assert fair["requests"] >= 0.99 * today["requests"]  # type: ignore[operator]
    assert fair["queue_s"] == 0.0 and fair["overshoot"] == 0


def test_jain_index_and_client_figures() -> None:
    assert jain([5, 5, 5, 5]) == pytest.approx(1.0)
    assert jain([4, 0, 0, 0]) == pytest.approx(0.25)
    assert jain([]) is None and jain([0, 0]) is None
    assert client_figures([3, 1, 2]) == {
        "clients_served_min": 1,
        "clients_served_median": 2,
        "clients_served_max": 3,
        "jain": pytest.approx(36 / 42, abs=1e-4),
    }


def test_clients_served_through_a_quiet_spell_are_not_starved_by_a_surge() -> None:
    """The demo's shape: 192 clients under capacity for 42 s, then 480 on 320 slots.
    Counting the quiet spell's admissions ranked the first 192 behind every newcomer
    for a half-life (measured: min 1 / median 14 / max 29 served, Jain 0.71)."""
    sc = parse_scenario(
        {
            "duration_s": 60,
            "warmup_s": 42,
            "service": {"distribution": "exponential", "mean_s": 1.0},
            "clients": 192,
            "retry_jitter": True,
            "policies": ["gridroute"],
            "availability": {"shedding": True},
            "events": [{"at_s": 42, "clients": 480}],
        }
    )
    row = SimRun(sc, Policy.GRIDROUTE, 192).run().row
    assert row["jain"] >= 0.95  # type: ignore[operator]
    assert row["clients_served_min"] >= row["clients_served_median"] / 3  # type: ignore[operator]


def unequal(follow: bool, clients: int) -> tuple[dict[str, object], list[int]]:
    """4 gateways with 40/20/20/20 % of the clients on 320 slots, 5 s service."""
    sc = parse_scenario(
        {
            "duration_s": 70.5,
            "warmup_s": 10.5,
            "service": {"mean_s": 5.0},
            "retry_jitter": True,
            "gateways": [0.4, 0.2, 0.2, 0.2],
            "gateway_sites": ["hub", "west", "east", "hub"],
            "clients": clients,
            "policies": ["gridroute"],
            "availability": {"shedding": True, "follow_demand": follow},
        }
    )
    run = SimRun(sc, Policy.GRIDROUTE, clients)
    return run.run().row, list(run.tally.served_by)


@pytest.mark.parametrize("clients", [384, 512])
def test_budgets_that_follow_demand_serve_every_gateways_clients_alike(clients: int) -> None:
    """Issue 25: without it each gateway keeps a quarter of the slots, and a client behind
    the busy gateway is served half as often (measured: Jain 0.943 / 0.910)."""
    row, served = unequal(True, clients)
    fig = client_figures(served)
    assert fig["jain"] >= 0.97
    assert fig["clients_served_max"] <= 1.5 * fig["clients_served_min"]
    # Goodput: 0.997-1.000 of the slots over seeds 1-6 at 384 clients and at
    # 512, since free room is split by what gateways want (0.985-0.997 before).
    assert row["requests"] >= 0.99 * 320 / 5.0 * 60.0  # type: ignore[operator]
    before = client_figures(unequal(False, clients)[1])
    assert before["jain"] < 0.95  # the test fails without the rule


def test_free_room_is_not_drawn_twice_while_budgets_follow_unequal_demand() -> None:
    """Past capacity at 200 ms service (`past-capacity-shedding` with 40/20/20/20 % of
    512 clients behind four gateways, fair order): gateways past their demand targets
    each took their share of the room that outlasted a sample while the short one took
    it all, so it was drawn twice (measured: 1,417 overshoots, 2.0 % of the requests).
    Split by what the gateways want, 418 (0.6 %)."""
    sc = parse_scenario(
        {
            "name": "past-capacity-shedding",
            "gateways": [0.4, 0.2, 0.2, 0.2],
            "clients": 512,
            "policies": ["gridroute"],
            "availability": {"shedding": True, "fair_order": True},
        }
    )
    row = SimRun(sc, Policy.GRIDROUTE, 512).run().row
    assert row["overshoot"] <= 0.01 * row["requests"]  # type: ignore[operator]
    assert row["jain"] >= 0.99  # type: ignore[operator]
