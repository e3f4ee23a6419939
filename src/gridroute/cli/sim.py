"""`gridroute sim run SCENARIO.yaml`: run a scenario and print, save or plot its rows.

It sits above `sim/` and `grid/` because `--live` runs the scenario on real processes
(`grid/`), while `sim/` itself imports only `core/` and `wire/`. A malformed scenario is
the user's to fix, so it is one line naming the file, the field
and the reason, and exit code 2 (the usage-error code), never a traceback.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from gridroute.sim.scenario import Scenario

WIDE = 160
"""Columns the table gets when stdout is not a terminal."""

app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    add_completion=False,
    help="Discrete-event simulator.",
)


@app.callback()
def _group() -> None:
    """Measure routing policies in simulated time, with the gateway's own decision code."""


def _scenario(path: Path, duration_s: float | None) -> Scenario:
    """The scenario at `path` (duration overridden when given); a malformed one is one
    line naming the file and field, and exit 2."""
    from gridroute.config import ConfigError
    from gridroute.sim.scenario import load_scenario, parse_scenario

    try:
        sc = load_scenario(path)
        if duration_s is not None:
            sc = parse_scenario({**sc.model_dump(), "duration_s": duration_s}, str(path))
    except ConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    return sc


@app.command("run")
def run(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML (see docs/simulator.md).")],
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the rows as JSON here.")
    ] = None,
    plot_out: Annotated[
        Path | None, typer.Option("--plot", help="Draw share and rho over time (PNG).")
    ] = None,
    duration_s: Annotated[
        float | None,
        typer.Option("--duration", help="Override duration_s (seconds), for a quick look."),
    ] = None,
    live: Annotated[
        bool, typer.Option("--live", help="Run on real processes (a local grid per row).")
    ] = False,
    time_scale: Annotated[
        float | None,
        typer.Option("--time-scale", help="With --live: stretch every duration by K [auto]."),
    ] = None,
) -> None:
    """Run every policy at every client count of SCENARIO and print the table."""
    from rich.console import Console

    from gridroute.sim.engine import run_scenario
    from gridroute.sim.report import print_report, write_json

    sc = _scenario(scenario, duration_s)
    if live:
        from gridroute.grid.scenario_run import run_live

        results = run_live(sc, time_scale)
    else:
        results = run_scenario(sc)
    out = Console()
    if not out.is_terminal:
        out.width = max(out.width, WIDE)  # piped into a file or a log: never truncate
    print_report(sc, results, out)
    if json_out is not None:
        write_json(json_out, sc, results)
    if plot_out is not None:
        from gridroute.sim.plot import write_plot

        write_plot(plot_out, sc, results)


@app.command("compare")
def compare_cmd(
    scenario: Annotated[Path, typer.Argument(help="Scenario YAML (see docs/simulator.md).")],
    policies: Annotated[
        str,
        typer.Option(
            "--policies",
            help="Comma-separated policies; the first other than gridroute is the reference.",
        ),
    ] = "gridroute,saturation",
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the comparison as JSON here.")
    ] = None,
    tolerance: Annotated[
        float, typer.Option("--tolerance", help="Share points (0-1) past which sites differ.")
    ] = 0.05,
    duration_s: Annotated[
        float | None,
        typer.Option("--duration", help="Override duration_s (seconds), for a quick look."),
    ] = None,
    confirm: Annotated[
        int,
        typer.Option(
            "--confirm",
            help="More request streams (seeds) an unexplained difference is run on before "
            "it stays so; 0: the scenario's own stream only.",
        ),
    ] = 7,
) -> None:
    """Run SCENARIO under two or more policies on the same request stream and show, per
    site, where their shares differ, by how much, and the rule that explains it."""
    import json

    from rich.console import Console

    from gridroute.core.select import Policy
    from gridroute.sim.compare import compare
    from gridroute.sim.report import print_comparison

    try:
        chosen = [Policy(p.strip()) for p in policies.split(",") if p.strip()]
    except ValueError:
        known = ", ".join(p.value for p in Policy)
        typer.echo(f"error: --policies: {policies!r}: each must be one of {known}", err=True)
        raise typer.Exit(2) from None
    if len(chosen) < 2 or len(set(chosen)) != len(chosen):
        typer.echo(f"error: --policies: {policies!r}: name two or more different ones", err=True)
        raise typer.Exit(2)
    if not 0.0 <= tolerance <= 1.0:
        typer.echo(f"error: --tolerance: {tolerance}: must be within 0 and 1", err=True)
        raise typer.Exit(2)
    if confirm < 0:
        typer.echo(f"error: --confirm: {confirm}: must be 0 or more", err=True)
        raise typer.Exit(2)
    sc = _scenario(scenario, duration_s)
    results = compare(sc, chosen, tolerance, confirm, audit=True)
    out = Console()
    if not out.is_terminal:
        out.width = max(out.width, WIDE)
    print_comparison(sc, results, out)
    if json_out is not None:
        body = {"scenario": sc.name, "tolerance": tolerance, "rows": [c.as_dict() for c in results]}
        json_out.write_text(json.dumps(body, indent=2) + "\n")
