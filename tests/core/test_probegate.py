"""The probe gate's hysteresis (reference 4.3)."""

from gridroute.core.probegate import ProbeResult, ProbeState, ProbeThresholds, step

P, F, U = ProbeResult.PASSING, ProbeResult.FAILING, ProbeResult.UNKNOWN


def run(results: list[ProbeResult], thresholds: ProbeThresholds) -> list[bool]:
    state: ProbeState | None = None
    gates = []
    for i, r in enumerate(results):
        state = step(state, r, float(i), r.value, thresholds)
        gates.append(state.gated)
    return gates


def test_gated_only_at_failure_threshold() -> None:
    assert run([F, F, F, F], ProbeThresholds(3, 1)) == [False, False, True, True]


def test_a_pass_resets_the_failure_count() -> None:
    assert run([F, F, P, F, F], ProbeThresholds(3, 1)) == [False] * 5


def test_reopens_after_success_threshold_passes() -> None:
    assert run([F, F, P, P, F, P, P, P], ProbeThresholds(2, 3)) == [
        False, True, True, True, True, True, True, False,
    ]  # fmt: skip


def test_unknown_keeps_the_gate_where_it_was() -> None:
    assert run([F, F, U, U, P], ProbeThresholds(2, 1)) == [False, True, True, True, False]
    assert run([U, U, U, U], ProbeThresholds(1, 1)) == [False] * 4


def test_unknown_does_not_break_a_failure_streak() -> None:
    assert run([F, U, F], ProbeThresholds(2, 1)) == [False, False, True]
