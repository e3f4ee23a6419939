"""Session affinity (site-selection.txt: 'Affinity narrows only within the selected tier')."""

from random import Random

import pytest

from gridroute.core import Path, decide
from gridroute.core.affinity import AffinityTable

from .grid_builder import MODEL, Grid, Site


def test_a_session_returns_to_the_candidate_that_served_it() -> None:
    t = AffinityTable()
    t.put("s1", "west/p", 1.0)
    assert t.get("s1", 2.0) == "west/p"
    assert t.get("other", 2.0) is None


def test_entries_expire_after_the_ttl_and_the_table_is_bounded() -> None:
    t = AffinityTable(max_entries=2, ttl_s=10.0)
    t.put("a", "x", 0.0)
    assert t.get("a", 11.0) is None
    t.put("a", "x", 20.0)
    t.put("b", "y", 21.0)
    t.get("a", 22.0)
    t.put("c", "z", 23.0)  # evicts the least recently written: a
    assert len(t) == 2
    assert t.get("a", 23.0) is None and t.get("c", 23.0) == "z"


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        AffinityTable(max_entries=0)


def test_affinity_sticks_while_the_site_has_room_and_yields_when_it_is_full() -> None:
    g = Grid([Site("a", running=10), Site("b", running=10), Site("c", running=10)])
    t = AffinityTable()
    rng = Random(1)
    snap = g.refresh(1.0)
    first = decide(snap, MODEL, rng, own=g.own.counts, affinity=t.get("s", 1.0))
    assert first.view is not None
    t.put("s", first.view.key, 1.0)
    for _ in range(20):
        d = decide(snap, MODEL, rng, own=g.own.counts, affinity=t.get("s", 1.0))
        assert d.view is first.view and d.path is Path.AFFINITY
    # The pinned site fills up: the session moves on, and the table follows it.
    for s in g.sites:
        if f"{s.name}/p" == first.view.key:
            s.running = 100
    snap = g.refresh(2.0)
    d = decide(snap, MODEL, rng, own=g.own.counts, affinity=t.get("s", 2.0))
    assert d.view is not None and d.view.key != first.view.key
