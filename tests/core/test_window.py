"""Look-back windows: worst in window, not latest (issue 2 rule 1)."""

from gridroute.core.sample import Sample
from gridroute.core.window import SampleWindow


def _w(*samples: Sample) -> SampleWindow:
    w = SampleWindow("a/p")
    for s in samples:
        w.add(s)
    return w


def test_a_stray_zero_does_not_make_a_busy_site_look_idle() -> None:
    """'the site's value is the worst in the look-back window, not the latest (a stray 0
    must not make a busy site look idle)'."""
    w = _w(Sample("a", "p", 1.0, running=90, ready=1), Sample("a", "p", 2.0, running=0, ready=1))
    r = w.reading(queue_full=1.0)
    assert r is not None
    assert r.in_flight == 90
    assert r.latest_in_flight == 0


def test_values_combine_only_within_one_instant() -> None:
    """'combined only from values of the same instant': one scrape's endpoint count never
    multiplies another scrape's running count."""
    w = _w(Sample("a", "p", 1.0, running=10, ready=1), Sample("a", "p", 2.0, running=1, ready=10))
    r = w.reading(queue_full=1.0)
    assert r is not None
    assert r.in_flight == 10  # max(10*1, 1*10), never 10*10


def test_samples_older_than_the_lookback_are_pruned_but_the_newest_stays() -> None:
    w = _w(Sample("a", "p", 1.0, running=90), Sample("a", "p", 10.0, running=5))
    w.prune(lookback_s=5.0)
    r = w.reading(queue_full=1.0)
    assert r is not None and r.in_flight == 5
    w.prune(lookback_s=0.0)
    assert w.newest is not None and w.newest.at == 10.0


def test_duplicate_or_older_samples_are_ignored() -> None:
    w = SampleWindow("a/p")
    assert w.add(Sample("a", "p", 2.0, running=1))
    assert not w.add(Sample("a", "p", 2.0, running=50))
    assert not w.add(Sample("a", "p", 1.0, running=50))


def test_congested_in_flight_only_counts_backlogged_instants() -> None:
    w = _w(
        Sample("a", "p", 1.0, running=50, waiting=0, ready=1),
        Sample("a", "p", 2.0, running=40, waiting=3, ready=1),
    )
    r = w.reading(queue_full=1.0)
    assert r is not None
    assert r.congested_in_flight == 43
    assert r.congested_running == 40
    assert r.queued == 3


def test_unready_is_read_from_the_newest_sample() -> None:
    w = _w(Sample("a", "p", 1.0, running=1, ready=0), Sample("a", "p", 2.0, running=1, ready=2))
    r = w.reading(queue_full=1.0)
    assert r is not None and not r.unready
    w.add(Sample("a", "p", 3.0, running=0, ready=0))
    r = w.reading(queue_full=1.0)
    assert r is not None and r.unready
