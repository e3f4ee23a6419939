"""Prefix affinity measured three ways in one run: off, on, and without its load bound.

The issue's targets are read from these rows (bench/bench_prefix.py prints them,
tests/sim/test_prefix_runs.py asserts the ones that are simulated time only):
prefill_saved of the example scenario, the seed scenario's balance (per-site shares)
and overshoot beside affinity off, and p99 time to first token beside affinity off.
"""

from __future__ import annotations

from typing import Any

from gridroute.core import Policy
from gridroute.sim.engine import SimRun
from gridroute.sim.scenario import Scenario
from gridroute.sim.sessions import SessionsSpec

VARIANTS: dict[str, dict[str, Any]] = {
    "off": {"enabled": False},
    "on": {"enabled": True},
    "pure": {"enabled": True, "load_bound": False},
}
"""Prefix affinity settings per variant (`pure`: affinity passes budgets and tiers)."""


def three_ways(sc: Scenario, clients: int, policy: Policy = Policy.GRIDROUTE) -> dict[str, Any]:
    """One row per variant of `sc` at `clients` clients (the scenario's other prefix
    affinity settings kept)."""
    rows = {}
    for name, update in VARIANTS.items():
        variant = sc.model_copy(
            update={"prefix_affinity": sc.prefix_affinity.model_copy(update=update)}
        )
        rows[name] = SimRun(variant, policy, clients).run().row
    return rows


def with_sessions(sc: Scenario, sessions: SessionsSpec) -> Scenario:
    """`sc` (the seed scenario) with its clients sending multi-turn conversations."""
    return sc.model_copy(update={"sessions": sessions})


def overshoot_rate(row: dict[str, Any]) -> float:
    """Requests queued past a full site per request served."""
    return row["overshoot"] / row["requests"] if row["requests"] else 0.0


def share_gap(a: dict[str, Any], b: dict[str, Any]) -> float:
    """The largest difference of one site's share between two rows (balance)."""
    return float(max(abs(a["shares"][s] - b["shares"][s]) for s in a["shares"]))
