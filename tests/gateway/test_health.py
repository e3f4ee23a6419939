"""Active probes: rise/fall counting, demotion only after results, and readiness."""

from __future__ import annotations

import asyncio

from gridroute.core import Health
from gridroute.gateway.health import _Track, step
from tests.gateway.backends import closed_port
from tests.gateway.harness import MODEL, eventually, fake, run, running_grid


def test_rise_and_fall_counting() -> None:
    t = _Track()
    assert step(t, True, rise=2, fall=3) is Health.UNKNOWN
    assert step(t, True, rise=2, fall=3) is Health.UP
    assert step(t, False, rise=2, fall=3) is Health.UP
    assert step(t, False, rise=2, fall=3) is Health.UP
    assert step(t, True, rise=2, fall=3) is Health.UP  # a pass resets the failures
    for _ in range(2):
        step(t, False, rise=2, fall=3)
    assert step(t, False, rise=2, fall=3) is Health.DOWN
    assert step(t, True, rise=2, fall=3) is Health.DOWN
    assert step(t, True, rise=2, fall=3) is Health.UP


def test_dead_backend_is_demoted_and_the_live_one_takes_the_traffic() -> None:
    async def scenario() -> None:
        health = {"enabled": True, "interval_s": 0.02, "rise": 2, "fall": 2}
        sites = {"dead": closed_port(), "b": fake("b")}
        models = [{"name": MODEL, "policy": "first"}]
        async with running_grid(sites, health=health, local_site="dead", models=models) as g:
            current = g.gw.current
            assert {v.health for v in current.snapshot.views} == {Health.UNKNOWN}
            await eventually(lambda: current.health.get("dead/dead") is Health.DOWN)
            await eventually(lambda: current.health.get("b/b") is Health.UP)
            g.feed({"dead": (0.0, 0.0, 8.0), "b": (0.0, 0.0, 8.0)})
            view = current.snapshot.view("dead/dead")
            assert view is not None and view.demoted
            raw = await g.client().chat.completions.with_raw_response.create(
                model=MODEL, messages=[{"role": "user", "content": "x"}]
            )
            assert raw.headers["x-grid-site"] == "b"  # no retry needed: dead is demoted
            reg = g.gw.metrics.registry
            assert (
                reg.get_sample_value("grid_route_site_up", {"site": "dead", "cluster": "dead"})
                == 0.0
            )
            assert (
                reg.get_sample_value(
                    "grid_route_retries_total", {"site": "dead", "reason": "connect_failed"}
                )
                is None
            )
            await asyncio.sleep(0)

    run(scenario)
