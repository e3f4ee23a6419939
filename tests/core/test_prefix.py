"""Prefix fingerprint, the bounded prefix map, and prefix affinity inside `decide`."""

from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from gridroute.core.flow import Answered, Relay, request_flow
from gridroute.core.gridstate import Snapshot
from gridroute.core.prefix import (
    PrefixAffinitySettings,
    PrefixMap,
    PrefixOutcome,
    PrefixRequest,
    fingerprint,
    fingerprint_tokens,
)
from gridroute.core.select import Path, Policy, decide

from .flow_driver import FakeGrid
from .grid_builder import MODEL, Grid, Site

S = PrefixAffinitySettings(exploration=0.0)


@given(st.binary(max_size=4000), st.binary(max_size=2000))
def test_a_shared_prefix_shares_its_whole_blocks(head: bytes, tail: bytes) -> None:
    a = fingerprint(head, 64, 64)
    b = fingerprint(head + tail, 64, 64)
    whole = min(len(head) // 64, 64)
    assert a[:whole] == b[:whole]


def test_fingerprint_is_bounded_and_chained() -> None:
    data = bytes(range(256)) * 400  # 100 KiB
    blocks = fingerprint(data, 512, 64)
    assert len(blocks) == 64
    other = b"x" + data[1:]
    assert not set(fingerprint(other, 512, 64)) & set(blocks)  # a change at block 0 moves all


def test_only_whole_blocks_are_fingerprinted() -> None:
    """A server caches whole pages: a prompt shorter than one block has no prefix to
    reuse (identical short prompts must not pile onto one site), and a last partial
    block is not part of the fingerprint."""
    assert fingerprint(b"Say something." * 4, 64, 64) == ()
    assert fingerprint(b"x" * 64, 64, 64) != ()
    assert fingerprint(b"x" * 130, 64, 64) == fingerprint(b"x" * 128 + b"yz", 64, 64)
    assert len(fingerprint(b"x" * 191, 64, 64)) == 2
    assert fingerprint_tokens(list(range(127)), 128) == ()
    assert len(fingerprint_tokens(list(range(300)), 128)) == 2


def test_tokenizer_mode_blocks_token_ids() -> None:
    ids = list(range(1000))
    assert len(fingerprint_tokens(ids, 128, 4)) == 4
    assert fingerprint_tokens(ids, 128)[:3] == fingerprint_tokens(ids[:400], 128)[:3]


def test_map_is_bounded_in_entries_and_time() -> None:
    table = PrefixMap(max_entries=100, ttl_s=10.0)
    for i in range(50):
        table.record(fingerprint(str(i).encode() * 1000, 512, 8), f"k{i % 3}", float(i))
    assert len(table) == 100
    last = fingerprint(b"49" * 1000, 512, 8)
    assert table.matches(last, 49.0) == {"k1": 3}  # 2,000 bytes: 3 whole blocks
    assert table.matches(last, 100.0) == {}  # idle past the TTL


def test_longest_match_per_site() -> None:
    table = PrefixMap()
    turn1 = fingerprint(b"a" * 2048, 512, 64)
    turn2 = fingerprint(b"a" * 4096, 512, 64)
    table.record(turn1, "s0", 0.0)
    table.record(turn2[:3], "s1", 1.0)
    assert table.matches(turn2, 2.0) == {"s1": 3, "s0": 4}  # s1 overwrote 3 of s0's 4


def request(key: str, covered: int, total: int = 10, **kw: object) -> PrefixRequest:
    blocks = tuple(range(total))
    table = PrefixMap()
    table.record(blocks[:covered], key, 0.0)
    return PrefixRequest.start(blocks, S.model_copy(update=kw), table, 0.0)


def three(running: tuple[float, float, float] = (10, 10, 10)) -> Grid:
    return Grid([Site(n, running=r) for n, r in zip("abc", running, strict=True)])


def test_a_match_over_threshold_in_the_tier_is_a_hit() -> None:
    snap = three().refresh(1.0)
    for seed in range(20):
        pr = request("c/p", 9)
        d = decide(snap, MODEL, random.Random(seed), Policy.GRIDROUTE, {}, prefix=pr)
        assert (d.key, d.path, pr.outcome, pr.matched) == ("c/p", Path.PREFIX, PrefixOutcome.HIT, 9)


def test_below_threshold_is_a_miss() -> None:
    snap = three().refresh(1.0)
    pr = request("c/p", 7)
    d = decide(snap, MODEL, random.Random(1), Policy.GRIDROUTE, {}, prefix=pr)
    assert pr.outcome is PrefixOutcome.MISS and d.path is not Path.PREFIX


def test_a_queue_that_costs_more_than_the_saving_is_a_miss() -> None:
    g = Grid([Site("a", running=100, waiting=5), Site("b", running=100, waiting=5)])
    snap = g.refresh(1.0)
    # 10 blocks x 128 tokens / 10000 tok/s = 0.128 s saved < 2 s x 5 queued
    pr = request("b/p", 10)
    decide(snap, MODEL, random.Random(1), Policy.SATURATION, {}, prefix=pr)
    assert pr.outcome is not PrefixOutcome.HIT


def test_a_site_at_its_budget_is_not_chosen() -> None:
    g = three((10, 10, 10))
    snap = g.refresh(1.0)
    view = snap.view("c/p")
    assert view is not None
    own = {"c/p": int(view.budget)}  # this gateway holds its whole share of c
    for seed in range(50):
        pr = request("c/p", 10)
        d = decide(snap, MODEL, random.Random(seed), Policy.GRIDROUTE, own, prefix=pr)
        assert d.key != "c/p"
        assert pr.outcome is PrefixOutcome.OVERRIDDEN_BY_LOAD


def test_pure_affinity_passes_the_budget() -> None:
    snap = three().refresh(1.0)
    view = snap.view("c/p")
    assert view is not None
    pr = request("c/p", 10, load_bound=False)
    own = {"c/p": int(view.budget)}
    d = decide(snap, MODEL, random.Random(1), Policy.GRIDROUTE, own, prefix=pr)
    assert d.key == "c/p" and pr.outcome is PrefixOutcome.HIT


def test_affinity_never_crosses_tiers() -> None:
    # c is queued, a and b are queue-free with room: the queue-free tier is selected
    g = Grid([Site("a"), Site("b"), Site("c", waiting=1)])
    snap = g.refresh(1.0)
    pr = request("c/p", 10, queued_request_seconds=0.0)
    d = decide(snap, MODEL, random.Random(3), Policy.GRIDROUTE, {}, prefix=pr)
    assert d.key != "c/p" and pr.outcome is PrefixOutcome.OVERRIDDEN_BY_LOAD


def test_exploration_is_drawn_at_its_rate() -> None:
    snap = three().refresh(1.0)
    rng = random.Random(7)
    explored = 0
    for _ in range(4000):
        pr = request("c/p", 10, exploration=0.1)
        decide(snap, MODEL, rng, Policy.GRIDROUTE, {}, prefix=pr)
        explored += pr.outcome is PrefixOutcome.EXPLORED
    assert 300 < explored < 500


def test_disabled_is_a_miss_and_the_pick_is_unchanged() -> None:
    snap = three().refresh(1.0)
    pr = request("c/p", 10, enabled=False)
    a = decide(snap, MODEL, random.Random(5), Policy.GRIDROUTE, {}, prefix=pr)
    b = decide(snap, MODEL, random.Random(5), Policy.GRIDROUTE, {})
    assert a == b and pr.outcome is PrefixOutcome.MISS


def test_served_share_is_each_sites_part_of_the_recent_requests() -> None:
    table = PrefixMap()
    assert table.served_share("a", ["a", "b"]) is None
    for i in range(3):
        table.record((i,), "a", 0.0)
    table.record((9,), "b", 0.0)
    assert table.served_share("a", ["a", "b"]) == 0.75
    assert table.served_share("a", ["a"]) == 1.0  # only the keys asked about count
    # Old requests fade (SERVED_TAU_S): a site that answered long ago weighs little.
    for t in range(100, 103):
        table.record((t,), "b", float(t))
    share = table.served_share("a", ["a", "b"])
    assert share is not None and share < 0.01


def busy_request(key: str, share: float, total: int = 100) -> PrefixRequest:
    """A full match at `key`, which answered `share` of this gateway's last requests."""
    pr = request(key, 10)
    for i in range(total):
        pr.table.record((1000 + i,), key if i < share * total else "a/p", 0.0)
    return pr


def busy() -> tuple[Snapshot, dict[str, int]]:
    """Three equal sites at rho 0.6, all of it this gateway's, and its in-flight."""
    g = three((60, 60, 60))
    for key in ("a/p", "b/p", "c/p"):
        for _ in range(60):
            g.own.start(key, 0.0)
    return g.refresh(1.0), dict(g.own.counts)


def test_a_busy_site_over_its_share_of_the_requests_is_overridden() -> None:
    # Equal sites at rho 0.6 (busy), all of it this gateway's: c answered 60 % of the
    # recent requests, above its capacity share of a third plus the slack.
    snap, own = busy()
    for seed in range(20):
        pr = busy_request("c/p", 0.6)
        d = decide(snap, MODEL, random.Random(seed), Policy.GRIDROUTE, own, prefix=pr)
        assert pr.outcome is PrefixOutcome.OVERRIDDEN_BY_LOAD and d.path is not Path.PREFIX
    # At its share, the match is honoured.
    pr = busy_request("c/p", 0.34)
    d = decide(snap, MODEL, random.Random(1), Policy.GRIDROUTE, own, prefix=pr)
    assert d.key == "c/p" and pr.outcome is PrefixOutcome.HIT


def test_the_share_is_read_within_the_tier() -> None:
    # a is at its budget (out of the tier); b and c, busy, split the requests: c's half
    # is its capacity share of the tier, not too much of all three sites.
    snap, own = busy()
    view = snap.view("a/p")
    assert view is not None
    own["a/p"] = int(view.budget)
    pr = request("c/p", 10)  # one request served at c ...
    for i in range(100):  # ... and a hundred, half each at b and c
        pr.table.record((2000 + i,), "b/p" if i < 50 else "c/p", 0.0)
    d = decide(snap, MODEL, random.Random(1), Policy.GRIDROUTE, own, prefix=pr)
    assert d.key == "c/p" and pr.outcome is PrefixOutcome.HIT


def test_below_busy_a_conversation_keeps_its_site_whatever_its_share() -> None:
    # rho 0.1: one conversation answered by one site is all of its requests, and stays.
    snap = three((10, 10, 10)).refresh(1.0)
    pr = busy_request("c/p", 1.0)
    d = decide(snap, MODEL, random.Random(1), Policy.GRIDROUTE, {}, prefix=pr)
    assert d.key == "c/p" and pr.outcome is PrefixOutcome.HIT


def test_the_flow_records_the_site_that_answered() -> None:
    g = three()
    fg = FakeGrid(g.refresh(1.0), g.own)
    table = PrefixMap()
    blocks = fingerprint(b"system prompt " * 500, 512, 64)
    pr = PrefixRequest.start(blocks, S, table, 0.0)
    flow = request_flow(fg, MODEL, Policy.GRIDROUTE, prefix=pr)
    step = next(flow)
    first = step.view.key  # type: ignore[union-attr]
    step = flow.send(Answered(200))
    assert isinstance(step, Relay)
    again = PrefixRequest.start(blocks, S, table, 1.0)
    assert again.matches == {first: len(blocks)}
    flow2 = request_flow(fg, MODEL, Policy.GRIDROUTE, prefix=again)
    assert next(flow2).view.key == first  # type: ignore[union-attr]
    assert again.outcome is PrefixOutcome.HIT


def test_defaults_are_the_references() -> None:
    """reference-behaviour 1.9: enabled, 0.8, 0.02, 10000 tokens/s, 2.0 s, no tag path."""
    d = PrefixAffinitySettings()
    assert (d.enabled, d.threshold, d.exploration) == (True, 0.8, 0.02)
    assert (d.prefill_tokens_per_second, d.queued_request_seconds, d.tag_key_path) == (
        10000.0,
        2.0,
        None,
    )
