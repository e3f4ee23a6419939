"""Session affinity: a session goes back to its site while that site has room, moves when
it does not, and sessions are never metric labels."""

from __future__ import annotations

import collections
from random import Random

import pytest

from tests.gateway.harness import MODEL, fake, run, running_grid

pytestmark = pytest.mark.usefixtures("each_listener")  # both API listeners

CHAT = [{"role": "user", "content": "hello"}]


def _affinity_counts(g) -> dict[str, float]:  # type: ignore[no-untyped-def]
    reg = g.gw.metrics.registry
    return {
        o: reg.get_sample_value("grid_route_session_affinity_total", {"outcome": o}) or 0.0
        for o in ("hit", "moved", "new")
    }


def test_a_session_sticks_to_its_site_and_moves_when_that_site_is_full() -> None:
    async def scenario() -> None:
        sites = {n: fake(n) for n in ("a", "b", "c")}
        async with running_grid(sites) as g:
            g.gw.current.rng = Random(5)
            g.feed({"a": (0.0, 0.0, 20.0), "b": (0.0, 0.0, 20.0), "c": (0.0, 0.0, 20.0)})
            client = g.client()

            async def site_of(session: str | None) -> str:
                headers = {"x-session-id": session} if session else {}
                raw = await client.chat.completions.with_raw_response.create(
                    model=MODEL, messages=CHAT, extra_headers=headers
                )
                return raw.headers["x-grid-site"]

            first = await site_of("conv-1")
            assert {await site_of("conv-1") for _ in range(30)} == {first}
            # Without a session the same idle grid spreads over every site.
            spread = collections.Counter([await site_of(None) for _ in range(60)])
            assert set(spread) == {"a", "b", "c"}
            # The session's site is now full (queued): the session moves, and stays moved.
            loads = {s: (0.0, 0.0, 20.0) for s in ("a", "b", "c")}
            loads[first] = (20.0, 5.0, 20.0)
            g.feed(loads)
            moved = await site_of("conv-1")
            assert moved != first
            assert {await site_of("conv-1") for _ in range(10)} == {moved}
            counts = _affinity_counts(g)
            assert counts == {"hit": 40.0, "moved": 1.0, "new": 1.0}
            assert g.in_flight() == 0

    run(scenario)


def test_affinity_can_be_turned_off() -> None:
    async def scenario() -> None:
        sites = {n: fake(n) for n in ("a", "b")}
        async with running_grid(sites, affinity={"header": None}) as g:
            g.gw.current.rng = Random(5)
            g.feed({"a": (0.0, 0.0, 20.0), "b": (0.0, 0.0, 20.0)})
            client = g.client()
            seen = collections.Counter()
            for _ in range(40):
                raw = await client.chat.completions.with_raw_response.create(
                    model=MODEL, messages=CHAT, extra_headers={"x-session-id": "conv-1"}
                )
                seen[raw.headers["x-grid-site"]] += 1
            assert set(seen) == {"a", "b"}
            assert _affinity_counts(g) == {"hit": 0.0, "moved": 0.0, "new": 0.0}

    run(scenario)
