"""The two-site split's carry (core/spread.py): exact proportions over any stream."""

from __future__ import annotations

from random import Random

import pytest

from gridroute.core.spread import MAX_PAIRS, Spread

PAIR = ("m", "a/p", "b/p")


@pytest.mark.parametrize("share", [0.1, 0.37, 0.5, 0.9])
def test_the_first_site_gets_its_share_within_one_pick(share: float) -> None:
    spread = Spread(Random(3))
    firsts = 0
    for n in range(1, 5001):
        firsts += spread.first(PAIR, share)
        assert abs(firsts - share * n) <= 1.0
    assert firsts == pytest.approx(share * 5000, abs=1)


def test_changing_shares_are_followed_in_sum() -> None:
    spread, rng = Spread(), Random(1)
    due = got = 0.0
    for _ in range(3000):
        share = rng.uniform(0.1, 0.9)
        due += share
        got += spread.first(PAIR, share)
        assert abs(got - due) <= 1.0


def test_two_models_in_turn_each_split_evenly() -> None:
    """A carry per model: on one carry, alternating models landed each on one site."""
    spread = Spread()
    xs = ys = 0
    for _ in range(500):
        xs += spread.first(("x", "a/p", "b/p"), 0.5)
        ys += spread.first(("y", "a/p", "b/p"), 0.5)
    assert xs == ys == 250


def test_the_phase_differs_by_gateway_and_the_table_is_bounded() -> None:
    firsts = {Spread(Random(seed)).first(PAIR, 0.5) for seed in range(20)}
    assert firsts == {True, False}  # gateways do not all start on the same site
    spread = Spread()
    for i in range(MAX_PAIRS + 10):
        spread.first((f"model-{i}", "a/p", "b/p"), 0.5)
    assert len(spread) <= MAX_PAIRS
