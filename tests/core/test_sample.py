"""Sample arithmetic and plausibility (reference 1.2, issue 2 rule 1)."""

import math

import pytest

from gridroute.core.sample import MAX_COUNT, Sample, plausible


def test_in_flight_is_running_plus_waiting_per_endpoint_times_ready_plus_held() -> None:
    """'in-flight per instant = (running + waiting) per endpoint x ready endpoints + what
    flow control holds'."""
    s = Sample("a", "p", 1.0, running=3, waiting=2, ready=4, held=5)
    assert s.in_flight == (3 + 2) * 4 + 5


def test_capacity_is_max_running_times_ready_endpoints() -> None:
    """'Capacity = maxRunning x ready endpoints when known.'"""
    assert Sample("a", "p", 1.0, ready=3, max_running=16).capacity == 48
    assert Sample("a", "p", 1.0, ready=3).capacity is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (-3.0, 0.0),
        (0.0, 0.0),
        (7.5, 7.5),
        (MAX_COUNT, MAX_COUNT),
        (MAX_COUNT + 1, None),
        (math.inf, None),
        (-math.inf, None),
        (math.nan, None),
        (None, None),
    ],
)
def test_implausible_values_are_clamped_or_absent(
    raw: float | None, expected: float | None
) -> None:
    """'implausible values (negative, non-finite, over 1,000,000) are clamped or treated as
    absent'."""
    assert plausible(raw) == expected


def test_sanitized_sample_drops_a_huge_running_value() -> None:
    s = Sample("a", "p", 1.0, running=5e9, waiting=-1, kv_usage=3.0).sanitized()
    assert s.running is None and s.in_flight is None
    assert s.waiting == 0.0
    assert s.kv_usage == 1.0
