"""The admission queue's hold deadline is on the monotonic clock, not the wall clock.

Each test drives the request flow and `wait_in_queue` on a `CurrentGrid` whose wall
clock is injected and jumps by an hour on every read (an NTP step, a VM resumed, a
hand-set clock). The hold must still last `max_queue_ms`: not end at once (clock
stepped forward), not stretch by the step (clock stepped back).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable

from gridroute.core import Outcome, Policy, Sample
from gridroute.core.flow import Attempt, Hold, Refuse, Step, request_flow
from gridroute.gateway.admission_queue import wait_in_queue
from gridroute.gateway.current import CurrentGrid
from gridroute.gateway.routing import build_routing
from tests.gateway.harness import MODEL, config, run

START = 1_000_000.0
HOUR = 3600.0


def _full_grid(wall: Callable[[], float], max_queue_ms: int) -> tuple[CurrentGrid, str]:
    """One site with room for one request, and this gateway's one request on it."""
    cfg = config(
        {"a": "http://127.0.0.1:9"},
        availability={
            "ceiling_floor": 1.0,
            "fair_share": False,
            "max_queue_ms": max_queue_ms,
            "queue_overflow": "shed",
        },
    )
    current = CurrentGrid(build_routing(cfg), cfg.availability, clock=wall)
    key = current.routing.candidates[0].key
    sample = Sample("a", "a", START, running=0, waiting=0, ready=1.0, max_running=1, generation=1)
    current.refresh([sample], {"a": START}, START)
    current.own.start(key, START)
    return current, key


def test_hold_survives_the_wall_clock_stepping_forward() -> None:
    async def scenario() -> None:
        wall = itertools.count(START, HOUR).__next__  # an hour later at every read
        current, key = _full_grid(lambda: float(wall()), max_queue_ms=10_000)
        flow = request_flow(current, MODEL, Policy.GRIDROUTE)
        first = next(flow)
        assert isinstance(first, Hold)
        held = asyncio.create_task(wait_in_queue(flow, first, current))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not held.done()  # held: the hour-long steps did not end the 10 s hold
        current.own.end(key, START)
        current.changes.wake()
        step: Step = await held
        assert isinstance(step, Attempt) and step.decision.outcome is Outcome.ROUTE
        flow.close()

    run(scenario)


def test_hold_ends_at_max_queue_ms_when_the_wall_clock_steps_back() -> None:
    async def scenario() -> None:
        wall = itertools.count(START, -HOUR).__next__  # an hour earlier at every read
        current, _ = _full_grid(lambda: float(wall()), max_queue_ms=50)
        # Were the deadline on the wall clock, it would lie an hour further at each read
        # and the hold would never end: the run's bound would fail the test.
        flow = request_flow(current, MODEL, Policy.GRIDROUTE)
        step = await wait_in_queue(flow, next(flow), current)
        assert isinstance(step, Refuse) and step.decision.outcome is Outcome.SHED

    run(scenario, timeout=10.0)
