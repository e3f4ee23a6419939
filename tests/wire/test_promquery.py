"""Decoding site load from a Prometheus query API answer: the newest stamp of each
provider is its sample, bounds and drops as the relay's, judgement times per site."""

from __future__ import annotations

from typing import Any

import pytest

from gridroute.wire.promquery import (
    PromAnswerError,
    PromTooLarge,
    build_queries,
    decode_rounds,
    decode_samples,
    with_rounds,
)
from gridroute.wire.signals import DropReason

NOW = 1_700_000_100.0


def _series(name: str, site: str, provider: str, points: list[tuple[float, str]]) -> Any:
    return {
        "metric": {"__name__": name, "grid_site": site, "grid_provider": provider, "job": "x"},
        "values": [[t, v] for t, v in points],
    }


def _matrix(*series: Any) -> Any:
    return {"status": "success", "data": {"resultType": "matrix", "result": list(series)}}


def test_queries_name_the_sites_the_fields_and_the_selector() -> None:
    q = build_queries(["west", "hub", "a.b"], 'job="gridroute-signals"', 4.2)
    assert q.samples.startswith('{__name__=~"llm_d_epp_average_running_requests|')
    assert 'grid_site=~"a\\\\.b|hub|west", job="gridroute-signals"}[5s]' in q.samples
    assert q.rounds == (
        'max by (grid_site) (timestamp(up{grid_site=~"a\\\\.b|hub|west", job="gridroute-signals"}))'
    )
    assert "job" not in build_queries(["hub"], " ", 1).rounds


def test_the_newest_stamp_of_a_provider_is_its_sample() -> None:
    answer = _matrix(
        _series("llm_d_epp_average_running_requests", "hub", "p", [(NOW - 2, "3"), (NOW - 1, "4")]),
        _series("llm_d_epp_average_queue_size", "hub", "p", [(NOW - 2, "1"), (NOW - 1, "0")]),
        _series("llm_d_epp_ready_endpoints", "hub", "p", [(NOW - 1, "2")]),
        _series("grid_provider_config_generation", "hub", "p", [(NOW - 1, "7")]),
        _series("grid_provider_max_running", "hub", "p", [(NOW - 2, "16")]),  # older only
    )
    decoded = decode_samples(answer, ["hub"], NOW, max_series=100)
    assert decoded.dropped == {}
    (row,) = decoded.received
    s = row.sample
    assert (s.site, s.provider, s.at) == ("hub", "p", NOW - 1)
    assert (s.running, s.waiting, s.ready, s.generation) == (4.0, 0.0, 2.0, 7)
    assert s.max_running is None  # no sample at the newest stamp: absent, not stale
    assert row.stamp_ms == round((NOW - 1) * 1000)


def test_rows_are_dropped_by_reason_and_bounded() -> None:
    answer = _matrix(
        _series("llm_d_epp_ready_endpoints", "hub", "p", [(NOW + 5, "1")]),  # from the future
        _series("llm_d_epp_ready_endpoints", "hub", "q", [(NOW, "NaN")]),  # not a number
        _series("llm_d_epp_ready_endpoints", "bad site!", "p", [(NOW, "1")]),
        _series("llm_d_epp_ready_endpoints", "mars", "p", [(NOW, "1")]),  # not configured
        _series("llm_d_epp_ready_endpoints", "west", "p1", [(NOW, "1")]),
        _series("llm_d_epp_ready_endpoints", "west", "p2", [(NOW, "1")]),
    )
    decoded = decode_samples(answer, ["hub", "west"], NOW, max_series=10, max_providers=1)
    assert decoded.dropped == {
        DropReason.SKEW: 1,
        DropReason.PARSE: 2,
        DropReason.SITE_MISMATCH: 1,
        DropReason.CAP: 1,
    }
    assert [r.sample.key for r in decoded.received] == ["west/p1"]
    with pytest.raises(PromTooLarge):
        decode_samples(answer, ["hub"], NOW, max_series=5)


def test_a_lying_value_read_through_prometheus_is_clamped_as_on_the_signals_path() -> None:
    # A peer that lies (a huge count, a KV ratio over 1) and is scraped by Prometheus gets
    # the same treatment as on /signals: absent, and 1; a negative count drops the instant.
    answer = _matrix(
        _series("llm_d_epp_average_running_requests", "hub", "p", [(NOW - 1, "1e12")]),
        _series("llm_d_epp_average_queue_size", "hub", "p", [(NOW - 1, "3")]),
        _series("llm_d_epp_ready_endpoints", "hub", "p", [(NOW - 1, "2")]),
        _series("grid_provider_max_running", "hub", "p", [(NOW - 1, "5e9")]),
        _series("llm_d_epp_average_kv_cache_utilization", "hub", "p", [(NOW - 1, "7")]),
    )
    (row,) = decode_samples(answer, ["hub"], NOW, max_series=100).received
    s = row.sample
    assert (s.running, s.waiting, s.ready, s.max_running) == (None, 3.0, 2.0, None)
    assert s.kv_usage == 1.0
    assert s.capacity is None  # no ceiling can be learned from the lie


@pytest.mark.parametrize(
    "answer",
    [
        {"status": "error", "error": "parse error"},
        {"status": "success", "data": {"resultType": "vector", "result": []}},
        {"status": "success", "data": {"resultType": "matrix", "result": {}}},
        [],
    ],
)
def test_an_answer_that_is_not_a_matrix_is_refused(answer: Any) -> None:
    with pytest.raises(PromAnswerError):
        decode_samples(answer, ["hub"], NOW, max_series=10)


def test_rounds_are_the_last_scrape_attempt_per_configured_site() -> None:
    answer = {
        "status": "success",
        "data": {
            "resultType": "vector",
            "result": [
                {"metric": {"grid_site": "hub"}, "value": [NOW, str(NOW - 0.5)]},
                {"metric": {"grid_site": "mars"}, "value": [NOW, str(NOW)]},
                {"metric": {}, "value": [NOW, "1"]},
            ],
        },
    }
    rounds = decode_rounds(answer, ["hub", "west"])
    assert rounds == {"hub": NOW - 0.5}
    decoded = with_rounds(decode_samples(_matrix(), ["hub"], NOW, max_series=1), rounds)
    assert decoded.round_ends == {"hub": NOW - 0.5}


def test_a_negative_count_drops_its_instant_not_reads_as_idle() -> None:
    """A lying peer's negative in-flight, clamped to 0, read its site as idle and drew
    traffic there; as on /signals, the instant is dropped and the one before stands."""
    answer = _matrix(
        _series(
            "llm_d_epp_average_running_requests", "hub", "p", [(NOW - 2, "7"), (NOW - 1, "-4")]
        ),
        _series("llm_d_epp_ready_endpoints", "hub", "p", [(NOW - 2, "1"), (NOW - 1, "1")]),
    )
    got = decode_samples(answer, ["hub"], NOW, max_series=100)
    (row,) = got.received
    assert row.sample.running == 7.0 and row.sample.at == NOW - 2
    assert got.dropped[DropReason.PARSE] == 1
