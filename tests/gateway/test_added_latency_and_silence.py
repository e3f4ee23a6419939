"""The two gauges the alert rules need beyond the seed's names: how long a site has been
silent in the gateway's snapshot, and the latency the gateway itself adds."""

from __future__ import annotations

import math

import openai
import pytest

from tests.gateway.harness import MODEL, fake, run, running_grid

pytestmark = pytest.mark.usefixtures("each_listener")  # both API listeners

CHAT = [{"role": "user", "content": "hello"}]


def test_silent_seconds_is_nan_until_a_sample_then_its_age() -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a")}) as g:
            reg = g.gw.metrics.registry
            labels = {"site": "a", "cluster": "a"}
            before = reg.get_sample_value("grid_route_site_silent_seconds", labels)
            assert before is not None and math.isnan(before)
            g.feed({"a": (2.0, 0.0, 10.0)})
            age = reg.get_sample_value("grid_route_site_silent_seconds", labels)
            assert age is not None and 0.0 <= age < 60.0

    run(scenario)


def test_added_latency_is_observed_once_per_routed_request_and_not_for_refusals() -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a")}) as g:
            reg = g.gw.metrics.registry
            g.feed({"a": (2.0, 0.0, 10.0)})
            client = g.client()
            for _ in range(3):
                await client.chat.completions.create(model=MODEL, messages=CHAT)
            count = reg.get_sample_value("grid_route_added_latency_seconds_count", {})
            assert count == 3
            total = reg.get_sample_value("grid_route_added_latency_seconds_sum", {})
            assert total is not None and total >= 0.0
            with pytest.raises(openai.NotFoundError):
                await client.chat.completions.create(model="no-such-model", messages=CHAT)
            assert reg.get_sample_value("grid_route_added_latency_seconds_count", {}) == 3

    run(scenario)
