"""The demo's live terminal view: one table of sites, redrawn from the latest ticks.

Pure rendering: `render` takes the ticks and the phase being run and returns a rich
renderable, so the view is tested without a terminal. Colours carry the states a
reader must notice at a glance: a silent site in red, a returning one in yellow, a
rho past 1 in red, refusals and shedding in yellow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Group
from rich.table import Table
from rich.text import Text

from gridroute.grid.sampler import Tick, recent_rate, recent_shares

_LIVE_STYLE = {"live": "green", "silent": "bold red", "returning": "yellow", "demoted": "red"}


def _rho(value: float | None) -> Text:
    if value is None:
        return Text("-", style="dim")
    return Text(f"{value:.2f}", style="red" if value > 1.0 else "")


def _refusals(refused: Mapping[str, float]) -> Text:
    if not refused:
        return Text("-", style="dim")
    parts = ", ".join(f"{reason} {n:.0f}" for reason, n in sorted(refused.items()))
    return Text(parts, style="yellow")


def site_table(ticks: Sequence[Tick], capacity_shares: Mapping[str, float]) -> Table:
    """Per site: state, share of the last 3 s against its capacity share, rho, in-flight."""
    t = Table(expand=False, pad_edge=False)
    for col, justify in (("site", "left"), ("state", "left"), ("share 3s", "right"),
                         ("capacity", "right"), ("rho rep.", "right"), ("rho cnt.", "right"),
                         ("in-flight", "right"), ("refused (last 60 s)", "left")):  # fmt: skip
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    last = ticks[-1] if ticks else None
    shares = recent_shares(ticks)
    for name, cap in capacity_shares.items():
        st = None if last is None else last.sites.get(name)
        if st is None:
            t.add_row(name, Text("?", style="dim"), "-", f"{cap:.2f}", "-", "-", "-", "-")
            continue
        state = st.state
        share = shares.get(name)
        t.add_row(
            name,
            Text(state, style=_LIVE_STYLE.get(state, "dim")),
            "-" if share is None else f"{share:.2f}",
            f"{cap:.2f}",
            _rho(st.rho_reported),
            _rho(st.rho_counted),
            str(st.in_flight),
            _refusals(st.refused),
        )
    return t


def header(ticks: Sequence[Tick], phase: str, phase_left_s: float, clients: int) -> Text:
    """One line: the phase, its time left, clients, throughput, shedding and 429s."""
    last = ticks[-1] if ticks else None
    line = Text()
    line.append(f"{phase}", style="bold cyan")
    line.append(f"  {max(phase_left_s, 0):4.0f} s left  {clients} clients  ")
    line.append(f"{recent_rate(ticks):6.0f} req/s")
    if last is not None:
        line.append(f"  429s {last.shed_total:.0f}")
        if last.shedding:
            line.append("  SHEDDING", style="bold yellow")
        if last.error:
            line.append(f"  status: {last.error}", style="red")
    return line


def render(
    ticks: Sequence[Tick],
    capacity_shares: Mapping[str, float],
    phase: str,
    phase_left_s: float,
    clients: int,
) -> Group:
    """The whole live view."""
    return Group(header(ticks, phase, phase_left_s, clients), site_table(ticks, capacity_shares))


def digest(ticks: Sequence[Tick], phase: str, clients: int) -> str:
    """A one-line plain-text digest, for logs and pipes where a live view cannot draw."""
    if not ticks:
        return f"[{phase}] {clients} clients: no reading yet"
    last = ticks[-1]
    shares = recent_shares(ticks)
    sites = " ".join(
        f"{n}={st.state}/share {shares.get(n, 0.0):.2f}/rho "
        f"{'-' if st.rho_reported is None else f'{st.rho_reported:.2f}'}/in {st.in_flight}"
        for n, st in last.sites.items()
    )
    shed = " SHEDDING" if last.shedding else ""
    return (
        f"[{last.t:5.1f}s {phase}] {clients} clients {recent_rate(ticks):.0f} req/s "
        f"429s {last.shed_total:.0f}{shed} | {sites}"
    )
