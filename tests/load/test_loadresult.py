import math

import pytest

from gridroute.load.result import (
    LoadResult,
    RequestRecord,
    SiteShare,
    classify,
    quantile,
)
from gridroute.load.result import RequestOutcome as Outcome


def rec(start: float, latency: float, site: str, outcome: Outcome = Outcome.OK) -> RequestRecord:
    status = {Outcome.OK: 200, Outcome.SHED: 429, Outcome.FAILED: 503}.get(outcome, 404)
    return RequestRecord(start, latency, status, site, outcome)


def test_classify() -> None:
    assert [classify(s) for s in (200, 204, 429, 0, 500, 503, 404, 400)] == [
        Outcome.OK, Outcome.OK, Outcome.SHED, Outcome.FAILED, Outcome.FAILED,
        Outcome.FAILED, Outcome.CLIENT_ERROR, Outcome.CLIENT_ERROR,
    ]  # fmt: skip


def test_quantile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert quantile(values, 0.5) == 50.0
    assert quantile(values, 0.99) == 99.0
    assert quantile(values, 1.0) == 100.0
    assert quantile([3.0], 0.01) == 3.0
    assert math.isnan(quantile([], 0.5))


def test_counts_shares_and_latency_use_successes_only() -> None:
    result = LoadResult(
        (
            rec(0.0, 0.1, "a"),
            rec(0.0, 0.3, "a"),
            rec(0.1, 0.2, "b"),
            rec(0.2, 9.0, "b", Outcome.FAILED),
            rec(0.2, 0.01, "c", Outcome.SHED),
            rec(0.3, 0.01, "c", Outcome.CLIENT_ERROR),
        ),
        duration_s=1.0,
    )
    assert (result.ok, result.shed, result.failed) == (3, 1, 1)
    assert result.per_site == {"a": 2, "b": 1}
    assert result.shares == pytest.approx({"a": 2 / 3, "b": 1 / 3})
    assert result.latency_s(0.5) == 0.2
    assert result.latency_s(0.99) == 0.3
    summary = result.summary()
    assert summary["client_error"] == 1
    assert summary["throughput_rps"] == 3.0


def test_timeseries_buckets_by_completion_time() -> None:
    result = LoadResult((rec(0.2, 0.3, "a"), rec(0.9, 0.2, "b"), rec(2.5, 0.1, "a")), 3.0)
    assert result.timeseries() == [{"a": 1}, {"b": 1}, {"a": 1}]
    assert result.timeseries(bucket_s=2.0) == [{"a": 1, "b": 1}, {"a": 1}]


def test_peak_window_share_finds_the_skewed_window() -> None:
    # 30 s: sites alternate evenly except seconds 12..21, where site b carries 9 of 10.
    records = []
    for second in range(30):
        skewed = 12 <= second < 22
        for k in range(10):
            site = ("b" if k < 9 else "a") if skewed else ("a" if k % 2 else "b")
            records.append(rec(second + 0.01 * k, 0.001, site))
    result = LoadResult(tuple(records), 30.0)
    assert result.shares == pytest.approx({"a": 0.5 - 4 / 30, "b": 0.5 + 4 / 30})
    peak = result.peak_window_share()
    assert peak == SiteShare("b", pytest.approx(0.9), 12.0, 100)


def test_short_run_is_one_window_and_empty_run_has_no_peak() -> None:
    result = LoadResult((rec(0.0, 0.1, "a"), rec(0.0, 0.1, "a"), rec(1.0, 0.1, "b")), 2.0)
    peak = result.peak_window_share()
    assert peak is not None
    assert (peak.site, peak.share) == ("a", pytest.approx(2 / 3))
    assert LoadResult((), 1.0).peak_window_share() is None
    assert LoadResult((), 1.0).summary()["latency_p50_s"] is None
