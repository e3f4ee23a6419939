"""Capacity reports: freshness, quorum, fallback reasons (reference 4.4)."""

from gridroute.core.capacityreport import Attempt, CapacityReport, ReportPolicy, read

POLICY = ReportPolicy(max_age_s=30.0, quorum=2)


def ok(servable: int, at: float) -> Attempt:
    return Attempt(CapacityReport(servable, at))


def test_usable_needs_quorum_of_fresh_reports_and_takes_the_lowest() -> None:
    assert read((ok(4, 90), ok(3, 95)), 100.0, POLICY).reported == 3
    assert read((ok(4, 95),), 100.0, POLICY).reported is None


def test_stale_report_falls_back_with_stale_reason() -> None:
    r = read((ok(4, 0), ok(4, 10)), 100.0, POLICY)
    assert r.reported is None and r.fallback_reason and "stale" in r.fallback_reason


def test_unreachable_and_missing() -> None:
    r = read((Attempt(None, "connection refused"),), 100.0, ReportPolicy())
    assert r.fallback_reason == "unreachable: connection refused"
    assert read((), 0.0, ReportPolicy()).fallback_reason == "no capacity report yet"
