"""examples/groups/ on real processes: the spike's focused demo and the drain /
fall-through / recovery scenario, asserted on exactly the rows the demos print."""

from __future__ import annotations

from pathlib import Path

from gridroute.demo.groups import drain_and_fall_through, round_robin


def test_round_robin_splits_60_new_sessions_20_20_20_in_a_b_c_order(tmp_path: Path) -> None:
    out = round_robin(60, workdir=tmp_path, quiet=True)
    assert all(r.status == 200 for r in out.rows)
    assert [r.provider for r in out.rows] == ["a/a", "b/b", "c/c"] * 20
    assert out.split() == {"a/a": 20, "b/b": 20, "c/c": 20}
    assert {(r.group, r.step, r.affinity) for r in out.rows} == {("0", "first", "created")}
    assert out.digest_before is not None and out.digest_before == out.digest_after
    assert out.control_calls_after == out.control_calls_before  # no call on the request path
    assert out.gateway_fetches_after == out.gateway_fetches_before


def test_drain_retry_in_group_fall_through_and_recovery(tmp_path: Path) -> None:
    out = drain_and_fall_through(workdir=tmp_path, quiet=True)
    assert all(r.status == 200 for r in out.rows)

    def rows(phase: str) -> list[tuple[str, str, str]]:
        return [(r.provider, r.group, r.step) for r in out.rows if r.phase == phase]

    assert {p for p, _, _ in rows("steady")} == {"a/a", "b/b", "c/c"}
    assert {g for _, g, _ in rows("steady")} == {"0"}
    drain = [r for r in out.rows if r.phase == "drain"]
    pinned = [(r.provider, r.step, r.affinity) for r in drain if r.session == "pin-c"]
    assert pinned == [("c/c", "bound", "reused")] * 2  # existing_only keeps its session
    assert {(r.provider, r.group) for r in drain if r.session != "pin-c"} == {
        ("a/a", "0"),
        ("b/b", "0"),
    }
    # a is dead: every request still lands in group 0, on b (a retry when a was picked).
    assert {(p, g) for p, g, _ in rows("a-dead")} == {("b/b", "0")}
    assert {s for _, _, s in rows("a-dead")} <= {"first", "in_group"}
    # a and b dead: group 1 takes the traffic, by falling through until the probes see
    # group 0 down (the demo's first requests, unless the machine stalls for the 1.5 s
    # the probes need; tests/gateway proves the fall-through step exactly), then as the
    # first viable group.
    dead = rows("b-dead")
    assert {(p, g) for p, g, _ in dead} == {("d/d", "1")}
    assert {s for _, _, s in dead} <= {"fell_through", "first"} and dead[-1][2] == "first"
    assert {(p, g) for p, g, _ in rows("recovered")} == {("a/a", "0"), ("b/b", "0")}
