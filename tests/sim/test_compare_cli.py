"""`gridroute sim compare`: two policies on one request stream, as a table and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gridroute.cli import app

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scenarios"


def test_compare_names_where_the_policies_differ_and_why(tmp_path: Path) -> None:
    out = tmp_path / "compare.json"
    result = CliRunner().invoke(
        app,
        [
            "sim",
            "compare",
            str(EXAMPLES / "world-external-constant.yaml"),
            "--duration",
            "15",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "gridroute share" in result.output and "saturation share" in result.output
    body = json.loads(out.read_text())
    assert [r["clients"] for r in body["rows"]] == [12, 40]
    busy = body["rows"][1]
    # 40 clients on 30 free slots: the seed queues behind the outside load, gridroute
    # admits into free slots only; the differences carry that rule's name.
    assert busy["requests"]["gridroute"] > busy["requests"]["saturation"]
    assert busy["overshoot"]["gridroute"] == 0 < busy["overshoot"]["saturation"]
    assert {s["departure"] for s in busy["sites"]} == {"seed_overshoots"}
    assert "explained by a named rule" in result.output
    # Which arm of the pick sent each share there: gridroute holds what finds no room
    # (its admission queue) and picks only within the tiers with room; the seed reads
    # its sites full and sends into its overflow tiers.
    picks = {s["site"]: s["picks"] for s in busy["sites"]}
    with_room = {"pressure_p2c", "pressure_weighted", "single"}
    assert all(set(p["gridroute"]) <= with_room for p in picks.values()), picks
    overflow = sum(
        n for p in picks.values() for path, n in p["saturation"].items() if path not in with_room
    )
    assert overflow > 0, picks
    # Every attempt sent in the measured span is counted once, at its site.
    sent = sum(n for p in picks.values() for n in p["gridroute"].values())
    assert abs(sent - busy["requests"]["gridroute"]) <= 40, (sent, busy["requests"])
    assert "gridroute picks" in result.output
    # The seed's tier rule read on gridroute's first attempts (`sim/tier_audit.py`; not
    # retries, not the overflow tiers): none skipped a tier with room.
    tiers = busy["tier_rule"]
    assert set(tiers) == {"gridroute"} and "skip" not in tiers["gridroute"], tiers
    kept = tiers["gridroute"]["kept"]
    assert 0 < kept <= sent, (kept, sent)
    assert f"40 clients: gridroute's first attempts against the seed's tiers: kept {kept}," in (
        result.output.replace("\n", " ")
    )


def test_compare_rejects_an_unknown_policy_naming_the_option() -> None:
    result = CliRunner().invoke(
        app, ["sim", "compare", str(EXAMPLES / "seed-partition.yaml"), "--policies", "gridroute,x"]
    )
    assert result.exit_code == 2
    assert "--policies" in result.output and "'gridroute,x'" in result.output


def test_compare_needs_two_policies() -> None:
    result = CliRunner().invoke(
        app, ["sim", "compare", str(EXAMPLES / "seed-partition.yaml"), "--policies", "gridroute"]
    )
    assert result.exit_code == 2 and "two or more" in result.output


def test_outside_load_that_steps_is_read_over_the_measured_span() -> None:
    """From review: the comparison's rules read how much of a site outside load holds,
    and a stepped or traced level was read at 0 s, so world-external-stepped's hub (100
    of 128 slots held from 10 s to 20 s of a 2-30 s measured span) read as empty."""
    from gridroute.sim.compare import _outside
    from gridroute.sim.scenario import load_scenario

    root = Path(__file__).resolve().parents[2] / "examples" / "scenarios"
    sc = load_scenario(root / "world-external-stepped.yaml")
    assert _outside(sc, "hub") == pytest.approx(100 * 10 / 28 / 128)
    assert _outside(sc, "west") == 0.0
    sc = load_scenario(root / "world-external-constant.yaml")
    held = {s.name: s.external.in_flight for s in sc.sites if s.external is not None}
    for name, level in held.items():
        slots = next(s.slots for s in sc.sites if s.name == name)
        assert _outside(sc, name) == pytest.approx(level / slots)


def test_compare_confirms_on_as_many_streams_as_the_harness() -> None:
    """The CLI's `--confirm` default is the harness's (`compare.CONFIRM_STREAMS`): a user's
    own world is judged as the generated ones are."""
    import inspect

    from gridroute.cli.sim import compare_cmd
    from gridroute.sim.compare import CONFIRM_STREAMS

    assert inspect.signature(compare_cmd).parameters["confirm"].default == CONFIRM_STREAMS


def test_compare_refuses_a_negative_confirm() -> None:
    result = CliRunner().invoke(
        app, ["sim", "compare", str(EXAMPLES / "seed-partition.yaml"), "--confirm", "-1"]
    )
    assert result.exit_code == 2 and "--confirm" in result.output


def test_compare_shows_the_level_share_a_level_departure_is_read_against(
    tmp_path: Path,
) -> None:
    """World 602 of the harness, as a user's own scenario: the seed's run collapsed
    (its requests queued behind outside load) and sent s1 1.1 %; gridroute's 16.3 % is
    within 5 points of the level share (13.6 %: the clients spread so that every site
    they use ends at one pressure). The table's `why` and the JSON say so."""

    import yaml

    from gridroute.sim.compare import harness_world

    scenario = tmp_path / "world-602.yaml"
    scenario.write_text(yaml.safe_dump(harness_world("outside", 602)))
    out = tmp_path / "compare.json"
    result = CliRunner().invoke(
        app, ["sim", "compare", str(scenario), "--json", str(out)], env={"COLUMNS": "400"}
    )
    assert result.exit_code == 0, result.output
    (row,) = json.loads(out.read_text())["rows"]
    (s1,) = [s for s in row["sites"] if s["site"] == "s1"]
    assert s1["departure"] == "level", s1
    assert s1["level_share"] == pytest.approx(0.1359, abs=1e-4), s1
    assert "level (8 streams" in result.output and "level share 0.136" in result.output
    assert "explained by a named rule" in result.output
