"""`/grid/history`: one point per recorded second, bounded, with requests, refusals by
status, latency quantiles, and gaps where a site is silent."""

from __future__ import annotations

import math

import aiohttp
import openai
import pytest

from gridroute.gateway.timeline import Timeline, quantile
from tests.gateway.harness import MODEL, fake, run, running_grid

CHAT = [{"role": "user", "content": "hello"}]
INF = math.inf


def test_quantile_interpolates_within_a_bucket_like_prometheus() -> None:
    bounds = (0.1, 0.2, INF)
    assert quantile(0.5, bounds, (0.0, 10.0, 10.0)) == pytest.approx(0.15)
    assert quantile(0.99, bounds, (0.0, 10.0, 10.0)) == pytest.approx(0.199)
    assert quantile(0.99, bounds, (0.0, 0.0, 4.0)) == 0.2  # in +Inf: the last finite bound
    assert quantile(0.5, bounds, (0.0, 0.0, 0.0)) is None


def test_points_hold_requests_refusals_latency_and_share_and_the_buffer_is_bounded() -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a"), "b": fake("b")}) as g:
            gw = g.gw
            tl = Timeline(keep_s=3.0, resolution_s=1.0)
            g.feed({"a": (1.0, 0.0, 8.0)})  # b has no reading: unmeasured, never sampled
            tl.record(gw, 100.0)
            assert tl.points == type(tl.points)()  # the first call only sets the base
            client = g.client()
            for _ in range(4):
                await client.chat.completions.create(model=MODEL, messages=CHAT)
            with pytest.raises(openai.NotFoundError):
                await client.chat.completions.create(model="nope", messages=CHAT)
            tl.record(gw, 102.0)
            (p,) = tl.points
            assert p["t"] == 102.0
            assert p["requests_per_s"] == 2.5  # 5 answers over 2 s
            assert p["refusals_per_s"] == {"404": 0.5}
            assert p["p50_s"] is not None and 0 < p["p50_s"] <= p["p99_s"]
            assert p["sites"]["a"]["live"] == "live" and p["sites"]["a"]["share"] == 1.0
            assert p["sites"]["a"]["rho"] is not None
            assert p["sites"]["b"]["rho"] is None  # no reading: a gap, not a zero
            for t in (103.0, 104.0, 105.0, 106.0):
                tl.record(gw, t)
            assert [q["t"] for q in tl.points] == [104.0, 105.0, 106.0]
            quiet = tl.points[-1]
            assert quiet["requests_per_s"] == 0 and quiet["p50_s"] is None
            assert [q["t"] for q in tl.since(104.5)] == [105.0, 106.0]

    run(scenario)


def test_the_endpoint_serves_the_buffer_and_refuses_a_bad_since() -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a")}) as g, aiohttp.ClientSession() as http:
            g.gw.timeline.record(g.gw, 10.0)
            g.gw.timeline.record(g.gw, 11.0)
            async with http.get(g.url + "/grid/history") as r:
                body = await r.json()
            assert body["resolution_s"] == 1.0 and body["keep_s"] == 600.0
            assert [p["t"] for p in body["points"]][-1] == 11.0
            async with http.get(g.url + "/grid/history?since=11") as r:
                assert (await r.json())["points"] == []
            async with http.get(g.url + "/grid/history?since=x") as r:
                assert r.status == 400
                assert (await r.json())["error"]["code"] == "invalid_since"

    run(scenario)
