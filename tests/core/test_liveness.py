"""Silence and return (site-selection.txt, the silence paragraphs; issue 2 rule 5)."""

from random import Random

from gridroute.core import Live, Outcome, Path, decide
from gridroute.core.liveness import TRANSITIONS, Event, Liveness, step

from .grid_builder import MODEL, Grid, Site

W = 5.0  # default freshness window, seconds


def _grid() -> Grid:
    return Grid([Site("hub", running=10), Site("west", running=10)])


def test_a_site_silent_for_the_freshness_window_is_silent() -> None:
    """'A site that has published and then sends nothing for the freshness window is
    silent.'"""
    g = _grid()
    g.refresh(1.0)
    snap = g.refresh(7.0, only=["hub"])  # west sent nothing since 1.0; judged at 7.0
    assert snap.views[1].live is Live.SILENT
    rng = Random(1)
    assert {decide(snap, MODEL, rng).view.site for _ in range(200)} == {"hub"}  # type: ignore[union-attr]
    assert ("west", "silent") in decide(snap, MODEL, rng).refused


def test_a_peer_is_judged_at_its_operators_last_poll_round_so_a_stalled_poller_pauses() -> None:
    """'A peer is judged at the end of the operator's last poll round that tried it ... so a
    stalled poller or relay pauses the judgement rather than silencing every peer.'"""
    g = _grid()
    g.refresh(1.0)
    # The operator's poller stalled at 1.5: its last round that tried west ended then.
    snap = g.refresh(30.0, only=["hub"], rounds={"hub": 30.0, "west": 1.5})
    assert snap.views[1].live is Live.LIVE


def test_a_peer_with_no_poll_rounds_is_not_judged() -> None:
    """'A peer whose operator reports no poll rounds is not judged.'"""
    g = _grid()
    g.refresh(1.0)
    snap = g.refresh(60.0, only=["hub"], rounds={"hub": 60.0})
    assert snap.views[1].live is Live.LIVE


def test_the_local_site_is_judged_at_the_last_read_of_its_operator() -> None:
    g = _grid()
    g.refresh(1.0)
    snap = g.refresh(9.0, only=["west"], rounds={"hub": 9.0, "west": 9.0})
    assert snap.views[0].live is Live.SILENT


def test_a_silent_site_returns_after_two_new_samples_without_a_full_window_between() -> None:
    """'It routes again after two new samples with no full window between them, about two
    peer polls, so one poll through a lossy link does not bring it back.'"""
    g = _grid()
    g.refresh(1.0)
    assert g.refresh(8.0, only=["hub"]).views[1].live is Live.SILENT
    assert g.refresh(9.0).views[1].live is Live.RETURNING  # one new sample: not yet
    assert g.refresh(10.0).views[1].live is Live.LIVE  # the second one brings it back


def test_two_new_samples_with_a_full_window_between_do_not_bring_it_back() -> None:
    g = _grid()
    g.refresh(1.0)
    g.refresh(8.0, only=["hub"])
    assert g.refresh(9.0).views[1].live is Live.RETURNING
    assert g.refresh(15.5, only=["hub"]).views[1].live is Live.SILENT
    assert g.refresh(16.0).views[1].live is Live.RETURNING
    assert g.refresh(17.0).views[1].live is Live.LIVE


def test_one_poll_carrying_many_samples_counts_once() -> None:
    st = Liveness(Live.SILENT, 1.0)
    st = step(st, 20.0, 20.0, W)  # one refresh, newest sample 20.0 (however many it carried)
    assert st.state is Live.RETURNING


def test_when_every_site_is_silent_they_take_the_request_as_a_fallback() -> None:
    """'When every site is silent they take the request, and the pick counts as a
    fallback.'"""
    g = _grid()
    g.refresh(1.0)
    snap = g.refresh(20.0, sampled_at=1.0)
    d = decide(snap, MODEL, Random(1))
    assert d.outcome is Outcome.ROUTE and d.path is Path.FALLBACK


def test_a_gateway_starting_during_a_partition_sees_the_partitioned_site_silent() -> None:
    """'A peer candidate that publishes load and has sent nothing through a full window of
    rounds is silent too, so a gateway that starts during a partition does not send
    overflow to the partitioned site.'"""
    g = _grid()
    # First read: west's newest row is old.
    from gridroute.core import Sample

    samples = [
        g.sample(g.sites[0], 30.0),
        Sample("west", "p", 10.0, running=1, ready=1, max_running=100, generation=1),
    ]
    snap = g.state.refresh(samples, {"hub": 30.0, "west": 30.0}, 30.0, {}, g.own)
    assert snap.views[1].live is Live.SILENT


def test_the_transition_table_is_total() -> None:
    assert {(s, e) for s in Live for e in Event} == set(TRANSITIONS)
