"""The simulator's tally of queued time: integrated over the measured span only, at
every change of the sites' queues (what `past_capacity` reads), beside the sample once
a scrape that a live grid's metrics would show."""

from __future__ import annotations

import pytest

from gridroute.core import Policy
from gridroute.sim.compare import harness_world
from gridroute.sim.engine import SimRun
from gridroute.sim.scenario import parse_scenario
from gridroute.sim.tally import Tally


def test_queued_time_counts_only_the_measured_span() -> None:
    t = Tally(["a"], 3.0, 12.0)
    t.queued(1.0, 2)  # two queued in the warm-up: counted from 3 s
    t.queued(5.0, -1)  # 2 x 2 s
    t.queued(20.0, 1)  # after the span: nothing more is counted
    row = t.row(1.0)
    assert row["queued_s"] == pytest.approx(2 * 2.0 + 1 * 7.0)
    assert t.row(1.0)["queued_s"] == row["queued_s"]  # a second row adds nothing


def test_a_request_still_queued_at_the_end_counts_to_the_end() -> None:
    t = Tally(["a"], 0.0, 10.0)
    t.queued(4.0, 3)
    assert t.row(1.0)["queued_s"] == pytest.approx(3 * 6.0)


def test_past_capacity_the_integral_is_what_the_excess_forces() -> None:
    """Outside-load world 5 at 399 clients for 116 free slots: the 283 excess clients
    queue the whole 9 s span, 2,547 request-seconds, and the integral reads exactly
    that; the sample once a scrape read 2,602 (5 % of the free slot-time too much)."""
    w = harness_world("outside", 5)
    row = SimRun(parse_scenario(w), Policy.GRIDROUTE, 399).run().row
    assert row["queued_s"] == pytest.approx((399 - 116) * 9.0, abs=1.0)
    assert row["queue_s"] > row["queued_s"]
