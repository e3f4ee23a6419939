"""A site's claimed capacity is bounded by configuration before routing reads it."""

from __future__ import annotations

import time

import pytest

from gridroute.core import Sample
from gridroute.gateway.claims import ClaimBounds, clamp
from gridroute.gateway.signals_loop import SignalsLoop
from gridroute.relay.poller import PollOutcome, PollResult
from gridroute.wire.signals import Decoded, Received
from tests.gateway.harness import MODEL, fake, run, running_grid

HUGE = 999_999.0


def _read(samples: list[Sample]) -> PollOutcome:
    now = time.time()
    decoded = Decoded(tuple(Received(int(s.at * 1000), s) for s in samples), {"b": now})
    return PollOutcome("local", PollResult.OK, now, now, decoded=decoded)


def _samples(now: float) -> list[Sample]:
    honest = Sample("a", "a", now, running=2.0, waiting=0.0, ready=2.0, max_running=8.0)
    boaster = Sample(
        "b", "b", now, running=2.0, waiting=0.0, ready=HUGE, max_running=HUGE, generation=1
    )
    return [honest, boaster]


def _weights(max_capacity: float | None) -> tuple[dict[str, float], float, float | None]:
    out: dict[str, tuple[dict[str, float], float, float | None]] = {}

    async def scenario() -> None:
        extra = {} if max_capacity is None else {"b": {"max_capacity": max_capacity}}
        async with running_grid({"a": fake("a"), "b": fake("b")}, site_extra=extra) as g:
            loop = SignalsLoop(_Silent(), lambda: g.gw.current, "a", 1.0, g.gw.claims)
            loop.fold(_read(_samples(time.time())))
            plan = g.gw.current.snapshot.plan(MODEL)
            view = g.gw.current.snapshot.view("b/b")
            assert plan is not None and view is not None
            clamped = g.gw.metrics.registry.get_sample_value(
                "grid_route_capacity_clamped_total", {"site": "b", "cluster": "b"}
            )
            out["r"] = (dict(plan.weights), clamped or 0.0, view.capacity)

    run(scenario)
    return out["r"]


class _Silent:
    async def poll(self) -> PollOutcome:
        raise AssertionError("not polled")

    async def close(self) -> None:
        return None


def test_an_unbounded_claim_draws_the_weight_without_a_bound() -> None:
    weights, clamped, capacity = _weights(None)
    assert clamped == 0 and capacity is not None and capacity > 1e11
    assert weights["b/b"] > 2 * weights["a/a"]  # the defect a bound exists for


def test_a_claim_over_max_capacity_is_clamped_and_counted() -> None:
    weights, clamped, capacity = _weights(16.0)
    assert clamped == 1
    assert capacity == pytest.approx(16.0)
    assert weights["b/b"] <= weights["a/a"]  # 16 claimed (12 free) vs 16 (12 free)


def test_clamp_lowers_max_running_only() -> None:
    now = time.time()
    s = Sample("b", "b", now, running=1.0, waiting=0.0, ready=4.0, max_running=100.0)
    got = clamp(s, 40.0)
    assert got is not None and got.capacity == 40.0 and got.ready == 4.0 and got.running == 1.0
    assert clamp(s, 400.0) is None
    bounds = ClaimBounds({"b/b": 100.0}, 2.0, 8.0)
    assert bounds.limit("b/b", None) == 16.0  # the factor over the floor
    assert bounds.limit("b/b", 30.0) == 60.0
    assert bounds.limit("b/b", 90.0) == 100.0
    assert bounds.limit("a/a", None) == 16.0
    assert ClaimBounds({}, None, 8.0).limit("a/a", 5.0) is None
