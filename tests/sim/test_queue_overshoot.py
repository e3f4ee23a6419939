"""An admission queue overshoots no more than no queue, under capacity.

A user turns the queue on to hold requests rather than send them into a full site. In
these worlds of `bench/bench_differential.py` it overshot more than no queue at all: a
refill of what a gateway held since the sample (`SiteView.refills`) was drawn beside room
within its budget, and the slot it took had shown free at the sample, so other gateways'
budgets counted it too (world 35: 267 overshoots where no queue has none; 209: 34). The
refill now comes after the whole budgets and their fractions (docs/selection.md, "held
at the site since the sample"; BENCHMARKS.md, "A refill after the budgets")."""

from __future__ import annotations

import pytest

from gridroute.core import Policy
from gridroute.sim.compare import harness_world
from gridroute.sim.engine import SimRun
from gridroute.sim.scenario import parse_scenario


def _overshoot(i: int, queue_ms: int) -> int:
    w = harness_world("outside", i)
    if queue_ms:
        w["availability"] = {"max_queue_ms": queue_ms}
    sc = parse_scenario(w)
    overshoot: int = SimRun(sc, Policy.GRIDROUTE, sc.client_counts[0]).run().row["overshoot"]
    return overshoot


@pytest.mark.parametrize(
    "i",
    [
        35,  # 7 gateways, 173 clients for 206 free slots
        209,  # 3 gateways, 47 clients for 67 free slots
    ],
)
def test_the_queue_overshoots_no_more_than_no_queue(i: int) -> None:
    assert _overshoot(i, 500) <= _overshoot(i, 0)
