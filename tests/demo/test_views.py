"""The demo's sampler joins, live view, summary and plot, on hand-made inputs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console

from gridroute.demo.report import (
    FaultTimes,
    PhaseSpan,
    fairness_line,
    fault_report,
    peak_share,
    summary_table,
)
from gridroute.demo.report import write_plot as write_demo_plot
from gridroute.demo.run import DemoOptions, parse_sites, plan
from gridroute.demo.view import digest, render
from gridroute.grid.layout import LocalSite
from gridroute.grid.sampler import Tick, recent_rate, recent_shares, tick_of
from gridroute.load.result import LoadResult, RequestOutcome, RequestRecord

CAPS = {"hub": 0.4, "west": 0.4, "east": 0.2}


def _status(
    live: dict[str, str], shedding: bool = False, east_routed: float = 0.0, health: str = "up"
) -> dict[str, Any]:
    return {
        "sites": [
            {"site": s, "live": state, "ready": True, "health": health, "rho_reported": 0.5,
             "rho_counted": 1.2 if s == "hub" else 0.4, "in_flight": 3, "capacity": 10.0,
             "ceiling": 10.0, "weight": 10.0}
            for s, state in live.items()
        ],
        "models": {"m": {"policy": "gridroute", "shedding": shedding, "state": "routed"}},
        "selections": {"total": {"pressure_p2c": 90.0, "shed": 7.0}, "recent": {}},
        "decisions": {"total": {"east": {"routed": east_routed, "silent": 3.0}},
                      "recent": {"east": {"routed": 4.0, "silent": 12.0},
                                              "hub": {"routed": 30.0}}},
    }  # fmt: skip


def _ticks() -> list[Tick]:
    live = {"hub": "live", "west": "live", "east": "live"}
    cut = {**live, "east": "silent"}
    return [
        tick_of(0.0, _status(live), {"hub": 0, "west": 0, "east": 0}),
        tick_of(1.0, _status(live), {"hub": 40, "west": 40, "east": 20}),
        tick_of(2.0, _status(cut, shedding=True), {"hub": 90, "west": 90, "east": 20}),
    ]


def test_a_tick_joins_the_gateway_view_with_the_sites_counts() -> None:
    tk = _ticks()[-1]
    east = tk.sites["east"]
    assert (east.live, east.served, east.in_flight) == ("silent", 20, 3)
    assert east.refused == {"silent": 12.0}  # routed decisions are not refusals
    assert tk.sites["hub"].refused == {}
    assert tk.shedding and tk.shed_total == 7.0


def test_a_tick_without_a_status_keeps_the_counts_and_the_reason() -> None:
    tk = tick_of(3.0, None, {"hub": 5}, error="TimeoutError")
    assert tk.sites["hub"].served == 5 and tk.sites["hub"].live is None
    assert tk.error == "TimeoutError" and not tk.shedding


def test_recent_shares_and_rate_come_from_completion_deltas() -> None:
    ticks = _ticks()
    assert recent_shares(ticks, window_s=1.0) == {"hub": 0.5, "west": 0.5, "east": 0.0}
    assert recent_shares(ticks, window_s=5.0) == {"hub": 0.45, "west": 0.45, "east": 0.1}
    assert recent_rate(ticks, window_s=1.0) == 100.0
    assert recent_shares(ticks[:1]) == {}


def test_the_live_view_names_a_silent_site_and_shedding() -> None:
    console = Console(width=140, record=True, color_system=None)
    console.print(render(_ticks(), CAPS, "partition east", 4.0, 24))
    text = console.export_text()
    assert "partition east" in text and "SHEDDING" in text and "429s 7" in text
    east_row = next(line for line in text.splitlines() if line.startswith("│east"))
    assert "silent" in east_row and "silent 12" in east_row
    line = digest(_ticks(), "partition east", 24)
    assert "east=silent/share 0.10" in line and "SHEDDING" in line


def _records() -> LoadResult:
    recs = []
    for i in range(40):  # phase 0: hub, west, west, east ...
        site = ("hub", "west", "hub", "east", "west")[i % 5]
        recs.append(RequestRecord(i * 0.1, 0.2, 200, site, RequestOutcome.OK, 0))
    for i in range(20):  # phase 1: east partitioned, a few 429s
        site = ("hub", "west")[i % 2]
        recs.append(RequestRecord(4 + i * 0.1, 0.3, 200, site, RequestOutcome.OK, 1))
    recs.append(RequestRecord(5.0, 0.01, 429, "unknown", RequestOutcome.SHED, 1))
    recs.append(RequestRecord(6.5, 0.2, 200, "east", RequestOutcome.OK, 1))  # after the restore
    return LoadResult(tuple(recs), 7.0)


def test_summary_has_one_row_per_phase_and_a_total() -> None:
    spans = [PhaseSpan("under capacity", 8, 0, 4), PhaseSpan("partition east", 8, 4, 7)]
    console = Console(width=160, record=True, color_system=None)
    console.print(summary_table(_records(), spans, CAPS))
    text = console.export_text()
    under = next(line for line in text.splitlines() if "under capacity" in line)
    assert "0.40" in under and "0.20" in under  # hub/west 16 of 40, east 8 of 40
    part = next(line for line in text.splitlines() if "partition east" in line)
    assert " 1 " in part  # one 429
    assert "whole run" in text


def test_fault_report_says_when_routing_stopped_and_resumed() -> None:
    live = {"hub": "live", "west": "live", "east": "live"}
    cut = {**live, "east": "silent"}
    ticks = [
        tick_of(3.5, _status(live, east_routed=100), {}),
        tick_of(5.5, _status(cut, east_routed=110), {}),
        tick_of(5.9, _status(cut, east_routed=111), {}),
        tick_of(6.2, _status({**live, "east": "returning"}, east_routed=111), {}),
        tick_of(6.4, _status(live, east_routed=111), {}),
    ]
    lines = fault_report(_records(), ticks, FaultTimes("east", 4.0, 6.0))
    assert lines[0] == (
        "east: partitioned at 4.0 s; the gateway stopped routing to it (silent) 1.5 s later, "
        "after sending it 10 requests that were retried elsewhere, and sent it 1 after that"
    )
    assert lines[1] == (
        "east: restored at 6.0 s; live again after 0.4 s, first request served there after 0.5 s"
    )


def test_requests_sent_to_the_dead_site_are_what_it_answered_with_its_failure() -> None:
    # The gateway routed 7 between the read before the cut and the ejection, but the
    # first 2 left before the failure took effect and were served: the site's own
    # count of requests it failed is the one reported.
    live = {"hub": "live", "west": "live", "east": "live"}
    cut = {**live, "east": "silent"}

    def stats(failed: int) -> dict[str, dict[str, int]]:
        return {"east": {"slots": 8, "failed_requests": failed}}

    ticks = [
        tick_of(3.5, _status(live, east_routed=100), {}, stats=stats(0)),
        tick_of(5.5, _status(cut, east_routed=107), {}, stats=stats(5)),
        tick_of(5.9, _status(cut, east_routed=108), {}, stats=stats(6)),
    ]
    (line,) = fault_report(_records(), ticks, FaultTimes("east", 4.0, None, 100.0))
    assert "after sending it 5 requests that were retried elsewhere" in line
    assert line.endswith("and sent it 1 after that")


def test_a_demoted_site_counts_as_routed_around() -> None:
    live = {"hub": "live", "west": "live", "east": "live"}
    ticks = [
        tick_of(3.5, _status(live, east_routed=100), {}),
        tick_of(4.8, _status(live, east_routed=104, health="down"), {}),
    ]
    assert ticks[1].sites["east"].state == "demoted"
    (line,) = fault_report(_records(), ticks, FaultTimes("east", 4.0, None))
    assert "stopped routing to it (demoted) 0.8 s later" in line


def test_a_partition_too_short_to_notice_is_said_so() -> None:
    live = {"hub": "live", "west": "live", "east": "live"}
    ticks = [tick_of(t, _status(live), {}) for t in (3.0, 4.5, 5.5, 6.5)]
    lines = fault_report(_records(), ticks, FaultTimes("east", 4.0, 6.0))
    assert "kept it live" in lines[0]
    assert lines[1] == "east: restored at 6.0 s"


def test_the_plot_is_a_png(tmp_path: Path) -> None:
    spans = [PhaseSpan("under capacity", 8, 0, 4), PhaseSpan("partition east", 8, 4, 7)]
    path = write_demo_plot(tmp_path / "d" / "demo.png", _records(), _ticks(), spans, CAPS,
                           FaultTimes("east", 4.0, 6.0))  # fmt: skip
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_demo_phases_follow_the_options() -> None:
    opts = DemoOptions(sites=parse_sites("a:10,b:10,c:20"), duration_s=40)
    phases = plan(opts)
    assert [p.name for p in phases] == [
        "under capacity", "partition c", "c returns", "past capacity, shedding on"
    ]  # fmt: skip
    assert [p.fault for p in phases] == [None, "partition", "restore", None]
    assert sum(p.duration_s for p in phases) == 40
    assert phases[0].clients == 24 and phases[-1].clients == 60  # 60 % and 150 % of 40 slots
    one = plan(DemoOptions(sites=(LocalSite("solo", 4),), duration_s=10))
    assert [p.name for p in one] == ["under capacity", "past capacity, shedding on"]


def test_parse_sites_names_the_bad_part() -> None:
    assert parse_sites("hub:128, east:64") == (LocalSite("hub", 128), LocalSite("east", 64))
    for bad in ("hub", "hub:x", "hub:0", ":3"):
        try:
            parse_sites(bad)
        except ValueError as exc:
            assert "--sites" in str(exc)
        else:
            raise AssertionError(f"{bad!r} accepted")


def test_peak_share_ignores_stragglers_past_the_phase() -> None:
    recs = [
        RequestRecord(i * 0.5, 0.4, 200, ("hub", "west")[i % 2], RequestOutcome.OK)
        for i in range(8)
    ]
    recs.append(RequestRecord(3.0, 6.0, 200, "west", RequestOutcome.OK))  # ends at 9 s, alone
    result = LoadResult(tuple(recs), 9.5)
    assert peak_share(result, 0.0, 4.0) == ("hub", 0.5)
    assert peak_share(result, 0.0, 10.0, window_s=2.0) == ("west", 1.0)


def test_fault_report_counts_from_the_gateways_count_read_at_the_cut() -> None:
    """The last tick before the cut can be a sampling interval old: requests routed in
    that interval, before the partition, are not "sent to it after it was cut off"."""
    live = {"hub": "live", "west": "live", "east": "live"}
    cut = {**live, "east": "silent"}
    ticks = [
        tick_of(3.5, _status(live, east_routed=100), {}),
        tick_of(5.5, _status(cut, east_routed=110), {}),
    ]
    lines = fault_report(_records(), ticks, FaultTimes("east", 4.0, None, routed_at_cut=107))
    assert "after sending it 3 requests that were retried elsewhere" in lines[0]


def test_the_past_capacity_line_gives_who_got_served() -> None:
    ok, shed = RequestOutcome.OK, RequestOutcome.SHED
    recs = [
        RequestRecord(1.0, 1.0, 200, "hub", ok, 0, None, 0),
        RequestRecord(3.0, 1.0, 200, "hub", ok, 0, None, 0),
        RequestRecord(3.0, 1.0, 200, "hub", ok, 0, None, 1),
        RequestRecord(3.0, 0.1, 429, "unknown", shed, 0, None, 2),
        RequestRecord(30.0, 1.0, 200, "hub", ok, 0, None, 2),  # past the phase
    ]
    line = fairness_line(LoadResult(tuple(recs), 10.0), PhaseSpan("past capacity", 3, 0, 10))
    assert "3 clients" in line and "min / median / max 0 / 1 / 2" in line
    assert "Jain's fairness index 0.600" in line  # (2+1+0)^2 / (3 * (4+1+0))
