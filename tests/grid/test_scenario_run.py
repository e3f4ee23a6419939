"""`sim run --live` pieces that need no processes: time scale, client split, counting."""

from __future__ import annotations

from gridroute.core.select import Policy
from gridroute.grid.sampler import tick_of
from gridroute.grid.scenario_run import auto_time_scale, client_phases, grid_spec, tally_row
from gridroute.load.result import LoadResult, Phase, RequestOutcome, RequestRecord
from gridroute.sim.scenario import parse_scenario


def test_auto_time_scale_keeps_the_peak_rate_small() -> None:
    seed = parse_scenario({})  # 256 clients, 320 slots, 200 ms: 1280 req/s simulated
    assert auto_time_scale(seed) == 4.5
    assert auto_time_scale(parse_scenario({"clients": 8})) == 1.0


def test_grid_spec_carries_the_scenario() -> None:
    sc = parse_scenario({"gateways": 2, "sites": [{"name": "a", "slots": 4},
                         {"name": "b", "slots": 2, "service_scale": 2.0}]})  # fmt: skip
    spec = grid_spec(sc, Policy.SATURATION, 3.0)
    assert spec.gateway_sites == ("a", "b") and spec.policy == "saturation"
    assert spec.service_of(spec.sites[1]) == 0.2 * 2.0 * 3.0


def test_clients_follow_events_and_split_across_gateways() -> None:
    sc = parse_scenario({"gateways": [0.75, 0.25], "duration_s": 30, "clients": 8,
                         "events": [{"at_s": 10, "clients": 4}]})  # fmt: skip
    assert client_phases(sc, 8, 2.0) == [
        [Phase(20.0, 6), Phase(40.0, 3)],
        [Phase(20.0, 2), Phase(40.0, 1)],
    ]


def test_a_live_run_is_counted_like_a_simulated_one() -> None:
    sc = parse_scenario({"duration_s": 10, "warmup_s": 2, "clients": 4, "policies": ["first"],
                         "events": [{"at_s": 4, "until_s": 6, "partition": "east"}]})  # fmt: skip
    k = 2.0
    recs = [
        RequestRecord(1.0, 1.0, 200, "hub", RequestOutcome.OK),  # ends at 1 s scenario: warm-up
        RequestRecord(6.0, 1.0, 200, "hub", RequestOutcome.OK),
        RequestRecord(8.0, 1.0, 200, "east", RequestOutcome.OK),
        RequestRecord(9.0, 0.1, 429, "unknown", RequestOutcome.SHED),
        RequestRecord(13.0, 1.0, 200, "east", RequestOutcome.OK),  # first east send after return
    ]
    live = {"hub": "live", "west": "live", "east": "live"}

    def status(east: str, routed: float) -> dict[str, object]:
        rows = [{"site": s, "live": east if s == "east" else v} for s, v in live.items()]
        return {"sites": rows, "decisions": {"total": {"east": {"routed": routed}}}}

    seen = ((7.0, "live", 10), (9.0, "live", 14), (10.0, "silent", 15), (12.5, "live", 15))
    ticks = [tick_of(t, status(state, routed), {}) for t, state, routed in seen]
    row, series = tally_row(sc, Policy.FIRST, 4, k, [LoadResult(tuple(recs), 14.0)], [ticks])
    assert row["requests"] == 3 and row["shed"] == 1 and row["failed"] == 0
    assert row["shares"] == {"hub": round(1 / 3, 4), "west": 0.0, "east": round(2 / 3, 4)}
    assert row["latency_p50_s"] == 0.5  # 1 s wall / k
    assert row["retried"] is None and row["policy"] == "first"
    (ev,) = row["events"]
    assert ev["silent_after_s"] == 1.0  # 10 s wall = 5 s scenario, partitioned at 4
    assert ev["sent_before_silent"] == 5 and ev["sent_after_silent"] == 0
    assert ev["live_again_after_s"] == 0.25 and ev["first_send_after_s"] == 0.5
    assert series.sites == ["hub", "west", "east"]
