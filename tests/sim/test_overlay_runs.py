"""The simulator under a routing overlay: the scenario's groups and picker decide every
request through the gateway's one request flow (retry in the group, fall-through,
ejection), and the pickers' distributions hold over seeded runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gridroute.config import ConfigError
from gridroute.core import Policy
from gridroute.sim.engine import SimRun
from gridroute.sim.scenario import Scenario, load_scenario, parse_scenario
from gridroute.sim.tally import Series

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def _overlay(*groups: list[str], picker: str = "roundRobin", **extra: Any) -> dict[str, Any]:
    cands = []
    for g, sites in enumerate(groups):
        for s in sites:
            cands.append(
                {"site": s, "provider": "default", "selection_group": g, **extra.get(s, {})}
            )
    return {
        "models": [
            {"model": "sim-model", "selection_policy": {"picker": picker}, "candidates": cands}
        ]
    }


def _scenario(overlay: dict[str, Any], **data: Any) -> Scenario:
    base: dict[str, Any] = {"duration_s": 10, "clients": 64, "policies": ["gridroute"]}
    return parse_scenario({**base, **data, "overlay": overlay})


def _run(sc: Scenario) -> tuple[dict[str, Any], Series]:
    result = SimRun(sc, Policy.GRIDROUTE, sc.client_counts[0]).run()
    return result.row, result.series


def _done(series: Series, site: str, start_s: float, end_s: float) -> int:
    """Requests completed at `site` in [start_s, end_s)."""
    row = series.completions[series.sites.index(site)]
    a = round((start_s - series.start_s) / series.bucket_s)
    b = round((end_s - series.start_s) / series.bucket_s)
    return sum(row[a:b])


def test_a_drained_top_group_takes_nothing_and_the_next_group_splits_round_robin() -> None:
    overlay = _overlay(["hub"], ["west", "east"])
    overlay["models"][0]["candidates"][0]["admission_state"] = "existing_only"
    row, _ = _run(_scenario(overlay))
    shares = row["shares"]
    assert shares["hub"] == 0.0  # existing_only: no new sessions, and the sim has none bound
    assert abs(shares["west"] - shares["east"]) <= 0.01  # A, B, A, B, ...
    assert row["failed"] == 0 and row["requests"] >= 0.99 * row["ideal_requests"]


def test_the_top_group_dying_falls_through_to_the_next_and_comes_back() -> None:
    sc = load_scenario(EXAMPLES / "overlay-fall-through.yaml")
    assert sc.overlay is not None
    row, series = _run(sc)
    # Before: group 0 only (hub and west), east idle although it has room.
    assert _done(series, "east", 0, 10) == 0
    assert _done(series, "hub", 0, 10) > 0 and _done(series, "west", 0, 10) > 0
    # Group 0 dead: after the connect timeouts settle, every request is served by east.
    assert _done(series, "hub", 10, 20) == _done(series, "west", 10, 20) == 0
    assert _done(series, "east", 13, 20) > 0.99 * 64 / 0.2 * 7
    # Back: group 0 is viable again and takes all new traffic.
    assert _done(series, "east", 25, 30) == 0
    assert _done(series, "hub", 25, 30) > 0 and _done(series, "west", 25, 30) > 0
    # Requests in service at the dying sites were retried in the group, then fell
    # through (3 attempts): none failed, as a gateway with the same overlay does.
    assert row["failed"] == 0 and row["retried"] > 0


def test_weighted_picks_follow_traffic_weight_exactly_over_the_cycle() -> None:
    weights = {"hub": {"traffic_weight": 3}, "west": {"traffic_weight": 1}}
    row, _ = _run(_scenario(_overlay(["hub", "west"], ["east"], picker="weighted", **weights)))
    shares = row["shares"]
    assert shares["east"] == 0.0
    assert shares["hub"] == pytest.approx(0.75, abs=0.01)  # closed loop: +-1 per client


def test_random_picks_are_uniform_within_tolerance() -> None:
    # 64 clients x 10 s / 0.2 s = 3200 picks; one share's std-dev is about 0.008.
    row, _ = _run(_scenario(_overlay(["hub", "west", "east"], picker="random"), seed=7))
    for site in ("hub", "west", "east"):
        assert row["shares"][site] == pytest.approx(1 / 3, abs=0.04), row["shares"]


def test_a_scenario_overlay_must_name_the_simulated_model_and_sites() -> None:
    bad_site = _overlay(["hub", "nowhere"])
    with pytest.raises(ConfigError, match=r"overlay.models.0.candidates.1.site: unknown site"):
        _scenario(bad_site)
    bad_provider = _overlay(["hub"])
    bad_provider["models"][0]["candidates"][0]["provider"] = "p"
    with pytest.raises(ConfigError, match=r"candidates.0.provider: a simulated site has one"):
        _scenario(bad_provider)
    other = _overlay(["hub"])
    other["models"][0]["model"] = "other"
    with pytest.raises(ConfigError, match=r"overlay.models: no entry for the simulated model"):
        _scenario(other)
    with pytest.raises(ConfigError, match=r"selection_policy.picker"):
        _scenario(_overlay(["hub"], picker="fancy"))


def test_an_overlay_file_named_by_a_scenario_is_read_relative_to_it(tmp_path: Path) -> None:
    (tmp_path / "groups.json").write_text('{"models": [{"model": "sim-model", "candidates": [')
    (tmp_path / "s.yaml").write_text("overlay: groups.json\n")
    with pytest.raises(ConfigError) as err:
        load_scenario(tmp_path / "s.yaml")
    assert str(tmp_path / "groups.json") in str(err.value)  # the overlay file is named
    (tmp_path / "s.yaml").write_text("overlay: missing.json\n")
    with pytest.raises(ConfigError, match="overlay: no such file"):
        load_scenario(tmp_path / "s.yaml")


def test_a_full_top_group_refusing_falls_through_to_the_next_group() -> None:
    def sites(when_full: str) -> list[dict[str, Any]]:
        return [
            {"name": "hub", "slots": 16, "when_full": when_full},
            {"name": "west", "slots": 16, "when_full": when_full},
            {"name": "east", "slots": 64},
        ]

    overlay = _overlay(["hub", "west"], ["east"])
    # 64 clients on group 0's 32 slots: each full member answers 429, the flow tries the
    # other member, then group 1, so east serves exactly what group 0 cannot.
    row, _ = _run(_scenario(overlay, sites=sites("refuse")))
    shares = row["shares"]
    assert shares["east"] == pytest.approx(0.5, abs=0.02)
    assert shares["hub"] == pytest.approx(0.25, abs=0.02)
    assert shares["west"] == pytest.approx(0.25, abs=0.02)
    assert row["shed"] == row["failed"] == row["overshoot"] == 0 and row["retried"] > 0
    assert row["requests"] >= 0.99 * row["ideal_requests"]
    # Sites that queue instead never refuse: group 0 stays viable and east stays idle.
    row, _ = _run(_scenario(overlay, sites=sites("queue")))
    assert row["shares"]["east"] == 0.0 and row["overshoot"] > 0
