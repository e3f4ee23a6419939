"""Pickers (core/pickers.py): exact sequences, exact weighted proportions, statistics."""

from __future__ import annotations

import math
from collections import Counter
from random import Random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridroute.core.pickers import (
    MAX_WEIGHT,
    Picker,
    PickerStates,
    effective_weights,
    pick_index,
    weighted_cycle,
)


def _picks(picker: Picker, n: int, count: int, cycle: tuple[int, ...] = ()) -> list[int]:
    states = PickerStates()
    rng = Random(1)
    return [pick_index(picker, n, cycle, states, "m", 0, rng) for _ in range(count)]


def test_deterministic_always_takes_the_first() -> None:
    assert _picks(Picker.DETERMINISTIC, 3, 5) == [0] * 5


def test_round_robin_repeats_a_b_c_exactly() -> None:
    assert _picks(Picker.ROUND_ROBIN, 3, 9) == [0, 1, 2] * 3


def test_round_robin_counters_are_per_model_and_group() -> None:
    states = PickerStates()
    rng = Random(0)
    rr = Picker.ROUND_ROBIN
    assert pick_index(rr, 3, (), states, "m", 0, rng) == 0
    assert pick_index(rr, 3, (), states, "m", 1, rng) == 0  # another group: its own turn
    assert pick_index(rr, 3, (), states, "other", 0, rng) == 0
    assert pick_index(rr, 3, (), states, "m", 0, rng) == 1


def test_states_are_bounded_least_recently_used_first() -> None:
    states = PickerStates(max_entries=2)
    states.turn("a", 0)
    states.turn("b", 0)
    states.turn("a", 0)  # a is now the most recent
    states.turn("c", 0)  # b goes
    assert len(states) == 2 and states.peek("b", 0) == 0 and states.peek("a", 0) == 2


def test_random_is_uniform_within_tolerance_over_a_large_sample() -> None:
    n, count = 4, 40_000
    got = Counter(_picks(Picker.RANDOM, n, count))
    # Each count ~ Binomial(40000, 1/4): sd ~ 87; 5 sd is a 1-in-3.5-million miss.
    for i in range(n):
        assert abs(got[i] - count / n) < 5 * math.sqrt(count * 0.25 * 0.75)


def test_random_is_the_same_sequence_for_the_same_seed() -> None:
    assert _picks(Picker.RANDOM, 5, 50) == _picks(Picker.RANDOM, 5, 50)


def test_weighted_cycle_is_smooth_and_exact() -> None:
    cycle = weighted_cycle([5, 1, 1])
    assert Counter(cycle) == {0: 5, 1: 1, 2: 1}
    assert cycle == (0, 1, 0, 2, 0, 0, 0) or max(_runs(cycle)) <= 3
    assert weighted_cycle([2, 4]) == (1, 0, 1)  # reduced by the gcd: 1:2


def _runs(seq: tuple[int, ...]) -> list[int]:
    runs, last, n = [], None, 0
    for x in seq:
        n = n + 1 if x == last else 1
        last = x
        runs.append(n)
    return runs


def test_weighted_zero_weight_gets_no_new_picks_and_all_zero_means_equal() -> None:
    assert Counter(weighted_cycle(effective_weights([3, 0, None]))) == {0: 3, 2: 1}
    assert weighted_cycle(effective_weights([0, 0])) == (0, 1)
    with pytest.raises(ValueError):
        weighted_cycle([-1, 2])


@given(st.lists(st.integers(0, MAX_WEIGHT), min_size=1, max_size=8), st.integers(1, 3))
def test_weighted_proportions_are_exact_over_whole_cycles(weights: list[int], cycles: int) -> None:
    ws = effective_weights(weights)
    cycle = weighted_cycle(ws)
    g = math.gcd(*ws)
    picks = _picks(Picker.WEIGHTED, len(ws), cycles * len(cycle), cycle)
    got = Counter(picks)
    for i, w in enumerate(ws):
        assert got[i] == cycles * w // g


@given(st.lists(st.integers(1, 50), min_size=2, max_size=6))
def test_weighted_turns_are_spread_no_member_waits_longer_than_its_share(
    weights: list[int],
) -> None:
    cycle = weighted_cycle(weights)
    n = len(cycle)
    for i, w in enumerate(weights):
        share = w // math.gcd(*weights)
        pos = [k for k, x in enumerate(cycle) if x == i]
        gaps = [(pos[(j + 1) % len(pos)] - pos[j]) % n or n for j in range(len(pos))]
        # Stride scheduling: gaps within one slot per other member of the ideal n / share.
        assert max(gaps) <= math.ceil(n / share) + len(weights)


def test_weighted_random_access_over_a_large_sample_matches_weights() -> None:
    # The statistical check: a long run entered at seeded random turns (as many gateways
    # starting at different points) still lands on the weights within 1 %.
    cycle = weighted_cycle([700, 200, 100])
    rng = Random(42)
    got = Counter(cycle[rng.randrange(len(cycle))] for _ in range(100_000))
    for i, share in enumerate((0.7, 0.2, 0.1)):
        assert abs(got[i] / 100_000 - share) < 0.01
