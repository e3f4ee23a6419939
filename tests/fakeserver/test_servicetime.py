import random
import statistics

import pytest

from gridroute.fakeserver.servicetime import ServiceTime, Timing


@pytest.mark.parametrize("dist", ["exponential", "lognormal"])
def test_mean_matches_the_setting(dist: str) -> None:
    st = ServiceTime(0.2, dist, sigma=0.8, rng=random.Random(7))  # type: ignore[arg-type]
    samples = [st.sample_s() for _ in range(40_000)]
    assert statistics.fmean(samples) == pytest.approx(0.2, rel=0.03)
    assert min(samples) >= 0
    assert statistics.pstdev(samples) > 0.05  # really scattered


def test_constant_is_exact_and_seeded_runs_replay() -> None:
    assert {ServiceTime(0.1).sample_s() for _ in range(10)} == {0.1}
    a = ServiceTime(0.1, "exponential", rng=random.Random(3))
    b = ServiceTime(0.1, "exponential", rng=random.Random(3))
    assert [a.sample_s() for _ in range(5)] == [b.sample_s() for _ in range(5)]


def test_per_token_timing_adds_a_gap_per_further_token() -> None:
    timing = ServiceTime(0.1, per_token_s=0.01).sample()
    assert timing == Timing(0.1, 0.01)
    assert timing.total_s(11) == pytest.approx(0.2)
    assert Timing(0.3, 0.0).total_s(50) == 0.3
