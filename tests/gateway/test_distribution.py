"""Where requests go: capacity shares, a site killed mid-run, the admission queue."""

from __future__ import annotations

import asyncio
import collections
from random import Random
from typing import Any

import openai
import pytest

from tests.gateway.harness import MODEL, eventually, fake, run, running_grid

CHAT = [{"role": "user", "content": "hello"}]


def test_two_sites_split_by_capacity_over_one_plus_rho() -> None:
    """saturation policy, two idle sites of 10 and 30: shares 0.25 / 0.75 (seeded draw)."""

    async def scenario() -> None:
        models = [{"name": MODEL, "policy": "saturation"}]
        async with running_grid({"a": fake("a"), "b": fake("b")}, models=models) as g:
            g.gw.current.rng = Random(7)
            g.feed({"a": (0.0, 0.0, 10.0), "b": (0.0, 0.0, 30.0)})
            client = g.client()
            seen: collections.Counter[str] = collections.Counter()
            n = 400
            for _ in range(n):
                raw = await client.completions.with_raw_response.create(model=MODEL, prompt="x")
                seen[raw.headers["x-grid-site"]] += 1
            # Binomial(400, 0.75) has sd 8.7; 4 sd either side.
            assert abs(seen["b"] - 0.75 * n) < 35, seen
            assert g.in_flight() == 0

    run(scenario)


def test_three_sites_follow_capacity_under_concurrency() -> None:
    """gridroute policy, three sites 8/8/4 slots, 16 concurrent streams: each site serves
    a share near its capacity share, and the own counters end at zero."""

    async def scenario() -> None:
        sites = {n: fake(n, slots=s, service_s=0.01) for n, s in (("a", 8), ("b", 8), ("c", 4))}
        async with running_grid(sites) as g:
            g.gw.current.rng = Random(3)
            g.feed({"a": (0.0, 0.0, 8.0), "b": (0.0, 0.0, 8.0), "c": (0.0, 0.0, 4.0)})
            client = g.client()
            seen: collections.Counter[str] = collections.Counter()

            async def worker() -> None:
                for _ in range(30):
                    stream = await client.chat.completions.with_raw_response.create(
                        model=MODEL, messages=CHAT, stream=True
                    )
                    seen[stream.headers["x-grid-site"]] += 1
                    async for _chunk in stream.parse():
                        pass

            await asyncio.gather(*(worker() for _ in range(16)))
            total = sum(seen.values())
            assert total == 480
            for site, share in (("a", 0.4), ("b", 0.4), ("c", 0.2)):
                assert abs(seen[site] / total - share) < 0.1, seen
            assert g.in_flight() == 0

    run(scenario)


@pytest.mark.parametrize("stream", [False, True])
def test_site_killed_mid_run_costs_no_client_error(stream: bool) -> None:
    async def scenario() -> None:
        sites = {"a": fake("a", service_s=0.002), "b": fake("b", service_s=0.002)}
        models = [{"name": MODEL, "policy": "saturation"}]
        # Every request here resends one prompt: were it long enough for prefix affinity
        # they could all stay on b and none be sent to a after it is killed (nothing to
        # retry). This test is of the retry, so affinity is off whatever the prompt.
        off = {"enabled": False}
        async with running_grid(sites, models=models, prefix_affinity=off) as g:
            g.feed({"a": (0.0, 0.0, 10.0), "b": (0.0, 0.0, 10.0)})
            client = g.client()
            done = 0
            errors: list[BaseException] = []
            after: collections.Counter[str] = collections.Counter()
            killed = asyncio.Event()

            async def worker() -> None:
                nonlocal done
                for _ in range(40):
                    started_after_kill = killed.is_set()
                    try:
                        raw = await client.chat.completions.with_raw_response.create(
                            model=MODEL, messages=CHAT, stream=stream
                        )
                        if stream:
                            async for _chunk in raw.parse():
                                pass
                        if started_after_kill:
                            after[raw.headers["x-grid-site"]] += 1
                    except openai.APIError as exc:
                        errors.append(exc)
                    done += 1

            async def killer() -> None:
                await eventually(lambda: done >= 60)
                await g.servers["a"].close()
                killed.set()

            await asyncio.gather(killer(), *(worker() for _ in range(6)))
            assert errors == []
            assert after["b"] > 0
            assert set(after) == {"b"}
            reg = g.gw.metrics.registry
            retried = sum(
                reg.get_sample_value("grid_route_retries_total", {"site": "a", "reason": r}) or 0
                for r in ("connect_failed", "disconnected", "reset", "connect_timeout")
            )
            assert retried > 0
            assert g.in_flight() == 0

    run(scenario)


def _queue_settings(**kw: Any) -> dict[str, Any]:
    settings = {"ceiling_floor": 1.0, "fair_share": False, "max_queue_ms": 5000}
    settings.update(kw)
    return {"availability": settings}


def test_admission_queue_holds_until_a_request_ends() -> None:
    async def scenario() -> None:
        async with running_grid({"a": fake("a", service_s=0.3)}, **_queue_settings()) as g:
            g.feed({"a": (0.0, 0.0, 2.0)})  # ceiling 2: room for two at a time
            client = g.client()
            server = g.servers["a"]
            calls = [
                asyncio.create_task(client.chat.completions.create(model=MODEL, messages=CHAT))
                for _ in range(3)
            ]
            await eventually(lambda: server.state.stats()["running"] == 2)
            assert g.in_flight() == 2  # the third waits at the gateway, not at the site
            assert server.state.stats()["waiting"] == 0
            results = await asyncio.gather(*calls)
            assert len(results) == 3
            assert server.state.stats()["served"] == 3
            assert g.in_flight() == 0

    run(scenario)


def test_admission_queue_sheds_past_max_queue_ms_when_told_to() -> None:
    async def scenario() -> None:
        overrides = _queue_settings(max_queue_ms=50, queue_overflow="shed")
        async with running_grid({"a": fake("a", service_s=2.0)}, **overrides) as g:
            g.feed({"a": (0.0, 0.0, 1.0)})
            client = g.client()
            first = asyncio.create_task(client.chat.completions.create(model=MODEL, messages=CHAT))
            await eventually(lambda: g.in_flight() == 1)
            with pytest.raises(openai.RateLimitError) as err:
                await client.chat.completions.create(model=MODEL, messages=CHAT)
            assert err.value.code == "capacity_exhausted"
            first.cancel()
            await eventually(lambda: g.in_flight() == 0)

    run(scenario)
