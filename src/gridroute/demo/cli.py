"""`gridroute demo`: the CLI face of `gridroute.demo.run` (what `make demo` runs).

Defaults come from `DemoOptions`; importing this module stays cheap so every other
CLI verb starts fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

_DEFAULT_PLOT = Path("out/gridroute-demo.png")


def demo(
    scenario: Annotated[
        str | None,
        typer.Argument(help="trafficmap: the TrafficMap demo (drain, probe down, restore)."),
    ] = None,
    sites: Annotated[
        str, typer.Option(help="Sites as NAME:SLOTS, comma-separated; the first runs the gateway.")
    ] = "hub:128,west:128,east:64",
    service_ms: Annotated[
        float, typer.Option(help="Mean service time per request (exponential), ms.")
    ] = 1000.0,
    clients: Annotated[
        int | None, typer.Option(help="Clients under capacity [default: 60% of all slots].")
    ] = None,
    peak_clients: Annotated[
        int | None, typer.Option(help="Clients past capacity [default: 150% of all slots].")
    ] = None,
    duration: Annotated[
        float, typer.Option(help="Seconds of traffic over all four phases (0: none).")
    ] = 60.0,
    partition: Annotated[
        str | None, typer.Option(help="Site to partition [default: the last site].")
    ] = None,
    plot: Annotated[Path, typer.Option(help="Where to write the PNG plot.")] = _DEFAULT_PLOT,
    serve: Annotated[
        bool,
        typer.Option(
            "--serve",
            help="Then leave the grid up (dashboard) under light traffic, 10% of the slots, "
            "until Ctrl-C.",
        ),
    ] = False,
    signals: Annotated[
        str,
        typer.Option(help="Signals transport: mesh (operators poll each other) or nats."),
    ] = "mesh",
) -> None:
    """Run a three-site grid on this machine: traffic, a partition, overload, a plot."""
    if scenario is not None:
        if scenario != "trafficmap":
            raise typer.BadParameter(f"scenario: only trafficmap, got {scenario!r}")
        from gridroute.demo.trafficmap import run_trafficmap_demo

        raise typer.Exit(run_trafficmap_demo())
    from gridroute.demo.run import DemoOptions, parse_sites, run_demo

    try:
        site_specs = parse_sites(sites)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    names = [s.name for s in site_specs]
    if partition is not None and partition not in names[1:]:
        raise typer.BadParameter(
            f"--partition: {partition!r} must be one of {names[1:]} (not the gateway's site)"
        )
    if duration < 0:
        raise typer.BadParameter("--duration: must be 0 or more")
    if signals not in ("mesh", "nats"):
        raise typer.BadParameter(f"--signals: mesh or nats, got {signals!r}")
    opts = DemoOptions(
        sites=site_specs,
        service_ms=service_ms,
        clients=clients,
        peak_clients=peak_clients,
        duration_s=duration,
        partition=partition,
        plot=plot,
        serve=serve,
        signals=signals,
    )
    raise typer.Exit(run_demo(opts))
