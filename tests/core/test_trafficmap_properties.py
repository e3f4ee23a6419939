"""Hypothesis properties of TrafficMap weights (issue 13, "Tests")."""

import math
from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from gridroute.core.probegate import ProbeResult, ProbeState
from gridroute.core.trafficmap import (
    MAX_WEIGHT,
    AllFailedPolicy,
    Drain,
    Home,
    MapInput,
    Mode,
    compute,
)
from gridroute.core.zeroweight import cause_of

probe_st = st.one_of(
    st.none(),
    st.builds(
        ProbeState,
        result=st.sampled_from(list(ProbeResult)),
        gated=st.booleans(),
    ),
)
factor_st = st.sampled_from(
    [Fraction(1), Fraction(1, 2), Fraction(3, 2), Fraction(7, 3), Fraction(2)]
)


@st.composite
def inputs(draw: st.DrawFn) -> MapInput:
    n = draw(st.integers(1, 8))
    homes = tuple(
        Home(
            f"c{i}",
            f"http://c{i}",
            draw(st.integers(0, 50)),
            draw(st.integers(0, 50)),
            draw(factor_st),
            draw(probe_st),
            draw(st.one_of(st.none(), st.integers(0, 50))),
        )
        for i in range(n)
    )
    policy = draw(st.sampled_from(list(AllFailedPolicy)))
    return MapInput("svc", Mode.SPLIT, homes, (), policy)


@settings(max_examples=300, deadline=None)
@given(inputs())
def test_weights_are_bounded_non_negative_ints_with_gcd_1_unless_all_zero(inp: MapInput) -> None:
    ws = [e.weight for e in compute(inp).entries]
    assert all(isinstance(w, int) and 0 <= w <= MAX_WEIGHT for w in ws)
    assert not any(ws) or math.gcd(*ws) == 1


@settings(max_examples=300, deadline=None)
@given(inputs(), st.data())
def test_draining_one_entry_never_changes_another(inp: MapInput, data: st.DataObject) -> None:
    target = data.draw(st.sampled_from([h.cluster for h in inp.homes]))
    before = {e.cluster: e.weight for e in compute(inp).entries}
    drained = MapInput(
        inp.service, inp.mode, inp.homes, (Drain("m", target),), inp.all_failed_policy
    )
    after = {e.cluster: e.weight for e in compute(drained).entries}
    assert after[target] == 0
    assert {c: w for c, w in after.items() if c != target} == {
        c: w for c, w in before.items() if c != target
    }


@settings(max_examples=300, deadline=None)
@given(inputs(), st.randoms(use_true_random=False))
def test_permuting_homes_does_not_change_weights(inp: MapInput, rnd) -> None:
    shuffled = list(inp.homes)
    rnd.shuffle(shuffled)
    other = MapInput(inp.service, inp.mode, tuple(shuffled), inp.drains, inp.all_failed_policy)
    assert compute(inp) == compute(other)


@settings(max_examples=300, deadline=None)
@given(inputs())
def test_every_zero_weight_has_a_row_in_the_table_and_no_positive_one_does(inp) -> None:
    table = compute(inp)
    for entry in table.entries:
        assert (cause_of(entry, table) is None) == (entry.weight > 0)


@settings(max_examples=200, deadline=None)
@given(inputs())
def test_weights_keep_the_order_of_what_can_serve_when_nothing_gates(inp: MapInput) -> None:
    plain = MapInput(
        inp.service,
        inp.mode,
        tuple(Home(h.cluster, h.endpoint, h.allocated, h.ready, h.factor) for h in inp.homes),
    )
    entries = compute(plain).entries
    for x in entries:
        for y in entries:
            if x.servable > y.servable:
                assert x.weight >= y.weight
