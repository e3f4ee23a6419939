"""The relay store: dedupe by stamp, bounded history, retention, truncation counted."""

from __future__ import annotations

from gridroute.core.sample import Sample
from gridroute.operator.store import RelayStore
from gridroute.wire.signals import Cut, Received, Store, decode_relay

NOW = 1_700_000_000.0


def s(site: str, provider: str, at: float) -> Sample:
    return Sample(site=site, provider=provider, at=at, running=1.0, ready=1.0)


def test_a_row_polled_twice_is_stored_once_at_its_first_local_time() -> None:
    store = RelayStore("hub")
    assert store.add_peer("west", [Received(1000, s("west", "p", NOW))]) == 1
    assert store.add_peer("west", [Received(1000, s("west", "p", NOW + 0.4))]) == 0
    assert store.latest()["west/p"].at == NOW


def test_history_is_bounded_by_count_and_window_but_the_newest_is_retained() -> None:
    store = RelayStore("hub", samples_per_provider=3, window_s=10, retain_latest_s=100)
    for i in range(6):
        store.add_local(s("hub", "own", NOW + i))
    assert [x.at for x in store.histories()[0]] == [NOW + 3, NOW + 4, NOW + 5]
    store.prune(NOW + 50)
    assert [x.at for x in store.histories()[0]] == [NOW + 5]
    store.prune(NOW + 200)
    assert store.histories() == []


def test_peer_providers_are_capped_stalest_evicted() -> None:
    store = RelayStore("hub", max_peer_providers=2)
    store.add_peer("west", [Received(1, s("west", "a", NOW)), Received(2, s("west", "b", NOW + 1))])
    store.add_peer("west", [Received(3, s("west", "c", NOW + 2))])
    assert set(store.latest()) == {"west/b", "west/c"}


def test_scopes_and_truncation_is_reported_once_per_body() -> None:
    cuts: list[dict[tuple[Store, Cut], int]] = []
    store = RelayStore("hub", budget=2000, on_cut=lambda c: cuts.append(dict(c)))
    store.add_local(s("hub", "own", NOW))
    for i in range(30):
        store.add_peer(f"site{i}", [Received(1, s(f"site{i}", "p", NOW - i / 10))])
    store.round_end("west", NOW)
    own = decode_relay(store.encode(NOW, own_only=True).body, date=NOW, offset=0)
    assert {x.site for x in own.samples} == {"hub"} and own.round_ends == {}
    everything = store.encode(NOW)
    store.encode(NOW)  # cached: not counted again
    assert len(everything.body) <= 2000
    assert len(cuts) == 1 and cuts[0][(Store.PEER, Cut.LATEST)] > 0
    got = decode_relay(everything.body, date=NOW, offset=0, max_lines=10**6)
    assert "hub" in {x.site for x in got.samples} and "west" in got.round_ends
