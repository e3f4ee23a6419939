"""Prefix affinity on real processes (issue 24): the turns of one conversation (the
official client, a long shared system prompt, a growing history, no session header)
land on one site, which reports each turn after the first as a cached-prefix hit;
once that site is full (load held there from outside) the next turns move to another
site, and stay there after the first site has room again.

    fake-server x3 --/metrics--> operator x3 (peers) --/signals--> gateway <-- openai
             ^ /admin/external
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.e2e.test_worlds_grid import Grid, _flat
from tests.gateway.processes import http, wait_for

pytestmark = pytest.mark.e2e

# 64 slots: one request in flight is rho 1/64, inside the default balance_slack (0.02),
# so a scrape that caught the previous turn still in flight is not read as imbalance.
SITES = dict.fromkeys("abc", 64)
SYSTEM = "You are a careful assistant who answers in full sentences. " * 280  # ~16 KiB


class Conversation:
    """One chat: each turn resends the system prompt and the whole history so far."""

    def __init__(self, url: str) -> None:
        self.client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        self.history: list[dict[str, str]] = [{"role": "system", "content": SYSTEM}]
        self.sites: list[str] = []
        self.cached: list[int] = []

    def turn(self) -> str:
        i = len(self.sites)
        self.history.append({"role": "user", "content": f"question {i}: and then?"})
        raw = self.client.chat.completions.with_raw_response.create(
            model="m",
            messages=self.history,  # type: ignore[arg-type]
        )
        usage = raw.parse().usage
        details = usage.prompt_tokens_details if usage is not None else None
        self.cached.append((details.cached_tokens or 0) if details is not None else 0)
        self.history.append({"role": "assistant", "content": f"answer {i} " * 12})
        site = raw.headers["x-grid-site"]
        self.sites.append(site)
        return site

    def turns(self, n: int) -> list[str]:
        return [self.turn() for _ in range(n)]


def _prefix_hits(url: str) -> int:
    """Requests the gateway routed by prefix affinity (selections with path `prefix`)."""
    total = http("GET", url + "/grid/status")[1]["selections"]["total"]
    return sum(n for key, n in _flat(total) if "prefix" in key)


@pytest.fixture
def grid(tmp_path: Path) -> Iterator[Grid]:
    # No exploration: every turn that matches is routed by its match, so the test is
    # deterministic; everything else is the defaults (affinity is on by default).
    with Grid(tmp_path, {}, sites=SITES, gateway={"prefix_affinity": {"exploration": 0.0}}) as g:
        yield g


def test_a_conversation_stays_on_its_site_until_that_site_is_full_then_moves(
    grid: Grid,
) -> None:
    g = grid
    chat = Conversation(g.gateway.url)
    first = chat.turn()
    # Three free sites of 8 slots: the turns follow the site that served the first.
    assert chat.turns(5) == [first] * 5, chat.sites
    # That fake server reports each turn after the first as a cached-prefix hit.
    assert chat.cached[0] == 0 and all(c > 0 for c in chat.cached[1:]), chat.cached
    assert _prefix_hits(g.gateway.url) >= 5

    # The site fills from outside: no room there under this gateway's budget.
    g.admin(first, "external", {"in_flight": SITES[first]})
    wait_for(lambda: (g.status()[first]["rho_reported"] or 0) >= 1.0, timeout=15)
    moved = chat.turn()
    assert moved != first, chat.sites
    assert chat.cached[-1] == 0, chat.cached  # the new site had not seen the conversation
    # The new site holds the conversation's cache now: the next turns follow it.
    assert chat.turns(4) == [moved] * 4, chat.sites
    assert all(c > 0 for c in chat.cached[-4:]), chat.cached

    # The first site has room again; the conversation stays where its cache is.
    g.admin(first, "external", {"in_flight": 0})
    wait_for(lambda: (g.status()[first]["rho_reported"] or 0) < 0.5, timeout=15)
    assert chat.turns(4) == [moved] * 4, chat.sites
    assert all(c > 0 for c in chat.cached[-4:]), chat.cached
