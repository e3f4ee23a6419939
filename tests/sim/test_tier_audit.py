"""The seed's tier rule read on every pick of a simulated run (`sim/tier_audit.py`).

Issue 23's first rule in time, not at one instant: between samples a gateway's requests
finish, and its budget at an over-full site (its part of the ceiling) then admitted it
where the estimate showed no room, drawn against sites with room within the budget (2.4 %
of gridroute's picks over `bench/bench_differential.py`'s outside-load worlds 0-239 before
`select.decide` took the sites with room first). The worlds below are the harness's
(`sim/compare.world`) where that happened most, each with the way it was found.
"""

from __future__ import annotations

import pytest

from gridroute.core import Policy
from gridroute.sim.compare import compare, harness_world
from gridroute.sim.engine import SimRun
from gridroute.sim.scenario import parse_scenario
from gridroute.sim.tier_audit import OWN_PART, SKIP


def _run(kind: str, i: int, queue_ms: int = 0) -> dict[str, int]:
    w = harness_world(kind, i)
    if queue_ms:
        w["availability"] = {"max_queue_ms": queue_ms}
    sc = parse_scenario(w)
    row = SimRun(sc, Policy.GRIDROUTE, sc.client_counts[0], audit=True).run().row
    tiers: dict[str, int] = row["tier_rule"]
    return tiers


@pytest.mark.parametrize(
    ("kind", "i", "queue_ms"),
    [
        ("outside", 14, 0),  # 881 skips before: an over-full site's part drawn by pairs
        ("outside", 21, 0),  # 754
        ("outside", 187, 0),  # 12 after the first fix: a queued site borrowed by pairs
        ("outside", 12, 0),  # while a queue-free site had room
        ("outside", 35, 500),  # 208 with an admission queue
        # the audit read a refill past the budget at a site without room as granted
        # (15 false skips); `decide` refills only where the estimate shows room
        ("outside", 443, 500),
        ("own", 87, 0),  # 1,079 with all load gridroute's own
    ],
)
def test_gridroute_keeps_the_seeds_tiers_over_a_run(kind: str, i: int, queue_ms: int) -> None:
    tiers = _run(kind, i, queue_ms)
    assert tiers.get(SKIP, 0) == 0, tiers
    assert tiers.get("kept", 0) > 0


def test_an_over_full_sites_part_is_still_taken_before_a_borrow() -> None:
    """The departure the rule names (docs/selection.md): past its budget at every site
    with room, a gateway takes its part of an over-full site rather than borrow poll-old
    room (outside-load world 18: 8 gateways past capacity; borrowing first served fewer
    and overshot more)."""
    tiers = _run("outside", 18)
    assert tiers.get(OWN_PART, 0) > 0 and tiers.get(SKIP, 0) == 0, tiers


def test_only_gridroutes_runs_are_audited_and_only_when_asked() -> None:
    sc = parse_scenario(harness_world("outside", 14))
    (c,) = compare(sc, [Policy.GRIDROUTE, Policy.SATURATION], audit=True)
    assert "tier_rule" in c.rows["gridroute"] and "tier_rule" not in c.rows["saturation"]
    plain = SimRun(sc, Policy.GRIDROUTE, sc.client_counts[0]).run().row
    assert "tier_rule" not in plain
    assert plain["requests"] == c.rows["gridroute"]["requests"]  # reading changes nothing
