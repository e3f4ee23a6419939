"""The simulator's outputs: a rich table in the seed PR's layout, and a JSON document.

The table keeps the seed's columns (share per site with its capacity share in the
header, peak 10 s window share, requests, overshoot) so the two can be read side by
side, and adds what the seed left implicit: the ideal, 429s, failures and latency.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from gridroute.sim.compare import STREAM_NOISE, Comparison, SiteDiff, sides
from gridroute.sim.engine import RunResult
from gridroute.sim.scenario import Scenario
from gridroute.sim.tier_audit import OWN_PART, SKIP


def capacity_shares(scenario: Scenario) -> dict[str, float]:
    """Each site's slots over all slots: the share an ideal router gives it."""
    total = scenario.total_slots
    return {s.name: s.slots / total for s in scenario.sites}


def document(scenario: Scenario, results: list[RunResult]) -> dict[str, Any]:
    """`{"scenario": {...}, "rows": [...]}`: the scenario as run and one row per run."""
    return {
        "scenario": scenario.model_dump(mode="json"),
        "rows": [r.row for r in results],
    }


def write_json(path: Path, scenario: Scenario, results: list[RunResult]) -> None:
    path.write_text(json.dumps(document(scenario, results), indent=2) + "\n", encoding="utf-8")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _spread(row: dict[str, Any]) -> str:
    """Per-client served counts as `min/median/max` (issue 16: who got served)."""
    lo = row.get("clients_served_min")
    if lo is None:
        return "-"
    return f"{lo}/{row['clients_served_median']}/{row['clients_served_max']}"


def table(scenario: Scenario, results: list[RunResult]) -> Table:
    """One line per (clients, policy), grouped by clients as the seed table is."""
    caps = capacity_shares(scenario)
    gw = scenario.gateways
    gw_text = f"{gw} gateway{'s' if gw != 1 else ''}" if isinstance(gw, int) else f"gateways {gw}"
    if scenario.overlay is not None:  # the overlay's picker decides, not the policy
        pickers = sorted({cap.picker.value for cap in scenario.overlay.models})
        gw_text += f", overlay picker {', '.join(pickers)}"
    t = Table(title=f"{scenario.name}: {scenario.duration_s:g} s, {gw_text}")
    t.add_column("clients", justify="right")
    t.add_column("policy")
    for name, share in caps.items():
        t.add_column(f"{name}, {share:.2f}", justify="right")
    for col in ("peak 10s window", "requests", "ideal", "overshoot", "shed", "failed"):
        t.add_column(col, justify="right")
    t.add_column("p50 s", justify="right")
    t.add_column("p99 s", justify="right")
    t.add_column("served per client min/med/max", justify="right")
    t.add_column("Jain", justify="right")
    last = None
    for r in results:
        row = r.row
        if last is not None and row["clients"] != last:
            t.add_section()
        last = row["clients"]
        t.add_row(
            str(row["clients"]),
            row["policy"],
            *(f"{row['shares'][name]:.2f}" for name in caps),
            f"{row['peak_window_share']:.2f}",
            str(row["requests"]),
            str(row["ideal_requests"]),
            str(row["overshoot"]),
            str(row["shed"]),
            str(row["failed"]),
            _seconds(row["latency_p50_s"]),
            _seconds(row["latency_p99_s"]),
            _spread(row),
            "-" if row.get("jain") is None else f"{row['jain']:.3f}",
        )
    if scenario.window_s != 10.0:
        t.columns[len(caps) + 2].header = f"peak {scenario.window_s:g}s window"
    return t


def events_table(results: list[RunResult]) -> Table | None:
    """What each gateway saw of each partitioned or failed site (None without events)."""
    rows = [(r.row, ev) for r in results for ev in r.row.get("events", ())]
    if not rows:
        return None
    t = Table(title="disturbances, seen from each gateway (seconds after start / return)")
    for col in ("clients", "policy", "event", "gateway", "silent after", "sent before"):
        t.add_column(col, justify="right")
    for col in ("sent after silent", "live after return", "first send after return"):
        t.add_column(col, justify="right")
    for row, ev in rows:
        t.add_row(
            str(row["clients"]),
            row["policy"],
            f"{ev['kind']} {ev['site']} {ev['at_s']:g}-{ev['until_s']:g}",
            str(ev["gateway"]),
            _seconds(ev["silent_after_s"]),
            str(ev["sent_before_silent"]),
            str(ev["sent_after_silent"]),
            _seconds(ev["live_again_after_s"]),
            _seconds(ev["first_send_after_s"]),
        )
    return t


def prefill_table(results: list[RunResult]) -> Table | None:
    """With scenario `sessions`: prefill saved and time to first token per row."""
    rows = [r.row for r in results if "prefill_saved" in r.row]
    if not rows:
        return None
    t = Table(title="prefill (sessions)")
    for name in ("clients", "policy", "prefill saved", "ttft p50 s", "ttft p99 s", "sessions"):
        t.add_column(name, justify="right")
    for row in rows:
        t.add_row(
            str(row["clients"]),
            row["policy"],
            f"{row['prefill_saved']:.3f}",
            _seconds(row["ttft_p50_s"]),
            _seconds(row["ttft_p99_s"]),
            str(row.get("sessions", "")),
        )
    return t


def print_report(scenario: Scenario, results: list[RunResult], console: Console) -> None:
    console.print(table(scenario, results))
    for extra in (events_table(results), prefill_table(results)):
        if extra is not None:
            console.print(extra)


def comparison_table(scenario: Scenario, results: list[Comparison]) -> Table:
    """`gridroute sim compare`: per client count and site, each policy's share and
    overshoot there, the difference, and the rule that explains a difference; then each
    policy's requests, overshoot and time queued in all."""
    policies = list(results[0].rows) if results else []
    t = Table(title=f"{scenario.name}: {' vs '.join(policies)} on the same request stream")
    t.add_column("clients", justify="right")
    t.add_column("site")
    for p in policies:
        t.add_column(f"{p} share", justify="right")
    for p in policies:
        t.add_column(f"{p} overshoot", justify="right")
    t.add_column("difference", justify="right")
    t.add_column("why")
    ours = sides(policies)[0] if policies else ""
    t.add_column(f"{ours} picks (path)")
    for c in results:
        for d in c.sites:
            t.add_row(
                str(c.clients),
                d.site,
                *(f"{d.shares[p]:.3f}" for p in policies),
                *(str(d.overshoot[p]) for p in policies),
                f"{d.delta:+.3f}",
                _why(d),
                _picks(c.rows[ours].get("picks_by_site", {}).get(d.site, {})),
            )
        t.add_row(
            str(c.clients),
            "requests",
            *(str(c.rows[p]["requests"]) for p in policies),
            *(str(c.rows[p]["overshoot"]) for p in policies),
            "",
            "",
            "",
        )
        # What `past_capacity` reads: the time requests waited, not how many found a
        # site full.
        t.add_row(
            str(c.clients),
            "queued (request-s)",
            *(str(c.rows[p].get("queued_s", "-")) for p in policies),
            *("" for _ in policies),
            "",
            "",
            "",
            end_section=True,
        )
    return t


def _why(d: SiteDiff) -> str:
    """The departure, and where it was run on more streams, the mean difference over
    them with its standard error (the evidence `stream_noise` rests on); for `level`,
    the level share gridroute's is read against."""
    why = d.departure or "-"
    summary = d.over_streams
    if summary is not None:
        why += f" ({len(d.streams)} streams: {summary[0]:+.3f} +- {summary[1]:.3f})"
    if d.level is not None:
        why += f" (level share {d.level:.3f})"
    return why


def tier_rule_line(policy: str, clients: int, verdicts: dict[str, int]) -> str:
    """One run's first attempts read against the seed's tiers (`sim/tier_audit.py`): the
    issue's first rule over time, which the shares above cannot show."""
    kept, own, skip = (verdicts.get(k, 0) for k in ("kept", OWN_PART, SKIP))
    return (
        f"{clients} clients: {policy}'s first attempts against the seed's tiers: kept "
        f"{kept}, its part of an over-full site before a borrow ({OWN_PART}) {own}, a "
        f"lower tier with admissible room skipped ({SKIP}) {skip} (docs/selection.md, "
        "'Where gridroute departs from the seed rule', Tiers)"
    )


PICKS_SHOWN = 3
"""Paths shown per site in the comparison table (the JSON has them all)."""


def _picks(by_path: dict[str, int]) -> str:
    """The most used paths of a site's picks (the row lists them most first): which arm
    of the pick sent a share there (a tier of one site is `single`, a pair's lower rho
    `pressure_p2c`)."""
    top = list(by_path.items())[:PICKS_SHOWN]
    return ", ".join(f"{path} {n}" for path, n in top) or "-"


def print_comparison(scenario: Scenario, results: list[Comparison], out: Console) -> None:
    out.print(comparison_table(scenario, results))
    for c in results:
        for policy, row in c.rows.items():
            if "tier_rule" in row:
                out.print(tier_rule_line(policy, c.clients, row["tier_rule"]))
    unexplained = sum(len(c.unexplained) for c in results)
    noise = sum(1 for c in results for d in c.sites if d.departure == STREAM_NOISE)
    out.print(
        f"{unexplained} site difference(s) past the tolerance that no rule explains"
        if unexplained
        else "every difference past the tolerance is explained by a named rule "
        "(docs/selection.md, 'Where gridroute departs from the seed rule')"
        + (
            f" or, {noise} of them, shown within it over more request streams (stream_noise)"
            if noise
            else ""
        )
    )
