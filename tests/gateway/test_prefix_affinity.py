"""Prefix affinity through the gateway: the turns of one conversation (no session
header) go back to the site that served the last turn, until that site has no room
under this gateway's budget; then they move, and follow the new site."""

from __future__ import annotations

from random import Random

import pytest

from tests.gateway.harness import MODEL, fake, run, running_grid

pytestmark = pytest.mark.usefixtures("each_listener")  # both API listeners

SYSTEM = "You are a careful assistant. " * 560  # about 16 KiB shared by every turn


def _outcomes(g) -> dict[str, float]:  # type: ignore[no-untyped-def]
    reg = g.gw.metrics.registry
    return {
        o: reg.get_sample_value("grid_route_prefix_affinity_total", {"outcome": o}) or 0.0
        for o in ("hit", "miss", "overridden_by_load", "explored")
    }


def test_a_conversation_stays_on_its_site_until_that_site_is_at_its_budget() -> None:
    async def scenario() -> None:
        sites = {n: fake(n) for n in ("a", "b", "c")}
        async with running_grid(sites, prefix_affinity={"exploration": 0.0}) as g:
            g.gw.current.rng = Random(3)
            idle = {s: (0.0, 0.0, 20.0) for s in ("a", "b", "c")}
            g.feed(idle)
            client = g.client()
            history: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}]

            cached: list[int] = []

            async def turn(i: int) -> str:
                history.append({"role": "user", "content": f"question {i}"})
                raw = await client.chat.completions.with_raw_response.create(
                    model=MODEL,
                    messages=history,  # type: ignore[arg-type]
                )
                details = raw.parse().usage.prompt_tokens_details  # type: ignore[union-attr]
                cached.append(details.cached_tokens or 0 if details else 0)
                history.append({"role": "assistant", "content": f"answer {i} " * 10})
                return raw.headers["x-grid-site"]

            first = await turn(0)
            assert [await turn(i) for i in range(1, 8)] == [first] * 7
            # The fake server reports each turn after the first as a cached-prefix hit.
            assert cached[0] == 0 and all(c > 0 for c in cached[1:])
            # The first turn matched nothing (a miss); the seven after it were hits.
            assert _outcomes(g) == {
                "hit": 7.0,
                "miss": 1.0,
                "overridden_by_load": 0.0,
                "explored": 0.0,
            }
            # The site the conversation is on is now full (no room under the budget).
            loads = dict(idle)
            loads[first] = (20.0, 0.0, 20.0)
            g.feed(loads)
            moved = await turn(8)
            assert moved != first
            assert cached[-1] == 0  # the new site had not seen the conversation
            assert _outcomes(g)["overridden_by_load"] == 1.0
            # The new site served the prefix: the next turns follow it.
            assert {await turn(i) for i in range(9, 14)} == {moved}
            assert g.in_flight() == 0

    run(scenario)


def test_in_token_mode_a_conversation_stays_on_its_site() -> None:
    """`prefix_affinity.tokenizer`: the gateway renders the messages, encodes them with
    the bundled vocabulary and matches token blocks (skipped without `splintr-rs`)."""
    pytest.importorskip("splintr", reason="the tokenizer extra (splintr-rs) is not installed")

    async def scenario() -> None:
        sites = {n: fake(n) for n in ("a", "b", "c")}
        pa = {"exploration": 0.0, "tokenizer": "llama3", "block_tokens": 64}
        async with running_grid(sites, prefix_affinity=pa) as g:
            g.gw.current.rng = Random(3)
            g.feed({s: (0.0, 0.0, 20.0) for s in ("a", "b", "c")})
            client = g.client()
            history: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}]
            got = []
            for i in range(6):
                history.append({"role": "user", "content": f"question {i}"})
                raw = await client.chat.completions.with_raw_response.create(
                    model=MODEL,
                    messages=history,  # type: ignore[arg-type]
                )
                got.append(raw.headers["x-grid-site"])
                history.append({"role": "assistant", "content": f"answer {i} " * 10})
            assert got == [got[0]] * 6
            assert _outcomes(g)["hit"] == 5.0 and _outcomes(g)["miss"] == 1.0

    run(scenario)


def test_token_mode_fingerprints_the_rendered_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    """The gateway's wiring of the token mode without the package: a tiny encoder stands
    in for the vocabulary; the body is decoded once and its messages rendered."""
    import json

    from gridroute.core.prefix import PrefixAffinitySettings, PrefixMap, fingerprint_messages
    from gridroute.gateway import proxy

    def words(text: str) -> list[int]:
        return [len(w) for w in text.split()]

    monkeypatch.setattr(proxy, "load_tokenizer", lambda name: words)
    s = PrefixAffinitySettings.model_construct(
        **{**PrefixAffinitySettings().model_dump(), "tokenizer": "words", "block_tokens": 8}
    )
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "hi"}]
    body = json.dumps({"model": MODEL, "messages": messages, "stream": False}).encode()
    got = proxy.prefix_of(body, PrefixMap(), s, 0.0)
    assert got is not None
    assert got.blocks == fingerprint_messages(messages, words, 8, s.max_blocks)
    assert proxy.prefix_of(b'{"messages": "no list"}', PrefixMap(), s, 0.0) is None
    assert proxy.prefix_of(b'{"messages": [', PrefixMap(), s, 0.0) is None  # not JSON


def _resent_30_times(prefix_affinity: dict[str, object], messages: list[dict[str, str]]) -> None:
    """Three idle sites; `messages` sent 30 times: each site serves some of them (no
    prefix keeps them on one) and no prefix-affinity outcome is counted."""

    async def scenario() -> None:
        sites = {n: fake(n) for n in ("a", "b", "c")}
        async with running_grid(sites, prefix_affinity=prefix_affinity) as g:
            g.gw.current.rng = Random(3)
            g.feed({s: (0.0, 0.0, 20.0) for s in ("a", "b", "c")})
            client = g.client()
            got = set()
            for _ in range(30):
                raw = await client.chat.completions.with_raw_response.create(
                    model=MODEL,
                    messages=messages,  # type: ignore[arg-type]
                )
                got.add(raw.headers["x-grid-site"])
            assert got == {"a", "b", "c"}
            assert sum(_outcomes(g).values()) == 0.0

    run(scenario)


def test_prefix_affinity_can_be_turned_off() -> None:
    _resent_30_times({"enabled": False}, [{"role": "system", "content": SYSTEM}])


def test_a_prompt_shorter_than_one_block_has_no_affinity() -> None:
    """One short prompt resent by every client (a probe, a load generator, a new user's
    first tries) has no whole block a server could cache: it is spread by the pressure
    pick like any other request, not kept on the site that served it first, and no
    affinity outcome is counted for it. Affinity on (the default)."""
    _resent_30_times({"exploration": 0.0}, [{"role": "user", "content": "Say something."}])


def test_the_gateway_config_carries_the_block() -> None:
    from gridroute.gateway.config import GatewayConfig

    cfg = GatewayConfig.model_validate(
        {
            "listen": "127.0.0.1:0",
            "sites": [{"name": "a", "backend_url": "http://127.0.0.1:1"}],
            "models": [{"name": "m"}],
            "prefix_affinity": {"threshold": 0.9},
        }
    )
    assert cfg.prefix_affinity.threshold == 0.9 and cfg.prefix_affinity.enabled
