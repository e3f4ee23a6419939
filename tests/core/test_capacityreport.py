"""Capacity reports: freshness, quorum, fallback reasons (reference 4.4)."""

from gridroute.core.capacityreport import Attempt, CapacityReport, ReportPolicy, read

POLICY = ReportPolicy(max_age_s=30.0, quorum=2)


def ok(servable: int, at: float) -> Attempt:
    return Attempt(CapacityReport(servable, at))


def test_usable_needs_quorum_of_fresh_reports_and_takes_the_quorum_th_lowest() -> None:
    assert read((ok(4, 90), ok(3, 95)), 100.0, POLICY).reported == 4
    assert read((ok(3, 90), ok(3, 95), ok(7, 96)), 100.0, POLICY).reported == 3
    assert read((ok(0, 90), ok(7, 95), ok(7, 96)), 100.0, POLICY).reported == 7
    assert read((ok(4, 95),), 100.0, POLICY).reported is None


def test_a_report_exactly_max_age_old_is_stale() -> None:
    policy = ReportPolicy(max_age_s=30.0, quorum=1)
    assert read((ok(4, 71),), 100.0, policy).reported == 4
    r = read((ok(4, 70),), 100.0, policy)
    assert r.reported is None and r.fallback_reason and "stale" in r.fallback_reason


def test_a_failed_poll_releases_the_window() -> None:
    before = (ok(2, 95), ok(2, 96))
    assert read(before, 100.0, POLICY).reported == 2
    failed = (*before, Attempt(None, "connection refused"))
    assert read(failed, 100.0, POLICY).fallback_reason == "unreachable: connection refused"
    once = read((*failed, ok(9, 97)), 100.0, POLICY)
    assert once.reported is None
    assert once.fallback_reason == "no quorum: 1 of 2 fresh report(s) since the last failed poll"
    assert read((*failed, ok(9, 97), ok(9, 98)), 100.0, POLICY).reported == 9


def test_stale_report_falls_back_with_stale_reason() -> None:
    r = read((ok(4, 0), ok(4, 10)), 100.0, POLICY)
    assert r.reported is None and r.fallback_reason and "stale" in r.fallback_reason


def test_unreachable_and_missing() -> None:
    r = read((Attempt(None, "connection refused"),), 100.0, ReportPolicy())
    assert r.fallback_reason == "unreachable: connection refused"
    assert read((), 0.0, ReportPolicy()).fallback_reason == "no capacity report yet"
