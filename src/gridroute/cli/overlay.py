"""`gridroute overlay render|check|drain|schema` and `gridroute control`.

One-off tools around the routing overlay (docs/overlay.md): render an overlay from a
render input, check an overlay file (optionally against a gateway config's backends),
drain or restore a provider in a render input, print the JSON Schema; and the
continuous renderer that writes and serves it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from gridroute.config import ConfigError

app = typer.Typer(no_args_is_help=True, help="The routing overlay: render, check, drain.")


def _fail(exc: ConfigError) -> typer.Exit:
    typer.echo(str(exc), err=True)
    return typer.Exit(2)


@app.command("render")
def render_command(
    input_file: Annotated[Path, typer.Argument(help="Render input (YAML).")],
    revision: Annotated[int, typer.Option(help="Revision to stamp.")] = 1,
    out: Annotated[Path | None, typer.Option(help="Write here (atomically) too.")] = None,
) -> None:
    """Render an overlay from INPUT and print it (JSON)."""
    from gridroute.control.atomicfile import write_atomic
    from gridroute.control.overlay import load_input, render
    from gridroute.wire.overlay import dumps

    try:
        text = dumps(render(load_input(input_file), revision))
    except ConfigError as exc:
        raise _fail(exc) from None
    if out is not None:
        write_atomic(out, text)
    typer.echo(text, nl=False)


@app.command("check")
def check_command(
    overlay_file: Annotated[Path, typer.Argument(help="Overlay file (JSON or YAML).")],
    gateway: Annotated[
        Path | None, typer.Option(help="Also check against this gateway config's sites.")
    ] = None,
) -> None:
    """Validate an overlay; print its digest and groups, or every problem (exit 2)."""
    from gridroute.config import read_text
    from gridroute.wire.overlay import digest, parse_overlay

    try:
        overlay = parse_overlay(read_text(overlay_file), str(overlay_file))
        if gateway is not None:
            from gridroute.gateway.config import load_config
            from gridroute.gateway.overlay_watch import check_backends
            from gridroute.gateway.routing import build_routing

            check_backends(overlay, build_routing(load_config(gateway)), str(overlay_file))
    except ConfigError as exc:
        raise _fail(exc) from None
    typer.echo(f"{overlay_file}: ok, revision {overlay.revision}, digest {digest(overlay)}")
    for cap in overlay.models:
        groups: dict[str, list[str]] = {}
        for c in cap.candidates:
            g = "-" if c.selection_group is None else str(c.selection_group)
            groups.setdefault(g, []).append(f"{c.key}({c.admission_state.value})")
        shown = "; ".join(f"group {g}: {', '.join(ks)}" for g, ks in groups.items())
        excluded = ", ".join(c.key for c in cap.excluded) or "none"
        typer.echo(f"  {cap.model}: picker {cap.picker.value}; {shown}; excluded {excluded}")


@app.command("drain")
def drain_command(
    input_file: Annotated[Path, typer.Argument(help="Render input to edit.")],
    provider: Annotated[str, typer.Argument(help="site/provider")],
    state: Annotated[
        str, typer.Option(help="existing_only (drain), excluded, or none (lift the drain).")
    ] = "existing_only",
) -> None:
    """Set a provider's admission in the render input (a running `control` picks it up)."""
    import yaml

    from gridroute.control.atomicfile import write_atomic
    from gridroute.control.overlay import with_drain
    from gridroute.core.groups import Admission

    try:
        admission = None if state == "none" else Admission(state)
    except ValueError:
        typer.echo(f"--state: must be existing_only, excluded or none (got {state!r})", err=True)
        raise typer.Exit(2) from None
    try:
        data = with_drain(input_file, provider, admission)
    except ConfigError as exc:
        raise _fail(exc) from None
    write_atomic(input_file, yaml.safe_dump(data, sort_keys=False))
    typer.echo(f"{input_file}: {provider} -> {state}")


@app.command("demo")
def demo_command(
    which: Annotated[str, typer.Argument(help="round-robin or drain (examples/groups/).")],
) -> None:
    """Run a selection-group demo of examples/groups/ on real local processes."""
    from gridroute.demo.groups import main

    raise typer.Exit(main(which))


@app.command("schema")
def schema_command() -> None:
    """Print the overlay's JSON Schema (version 1)."""
    from gridroute.wire.overlay import json_schema

    typer.echo(json.dumps(json_schema(), indent=1))


def control(
    input_file: Annotated[Path, typer.Option("--input", "-i", help="Render input (YAML).")],
    out: Annotated[Path | None, typer.Option(help="Overlay file to keep current.")] = None,
    listen: Annotated[
        str | None, typer.Option(help="host:port serving GET /overlay (port 0: any).")
    ] = None,
    interval_s: Annotated[float, typer.Option(help="Seconds between renders.")] = 1.0,
) -> None:
    """Run the control plane's overlay renderer: write and/or serve the overlay."""
    import asyncio

    from gridroute.control.overlay_service import OverlayService, serve
    from gridroute.logs import setup_logging

    setup_logging()
    if out is None and listen is None:
        typer.echo("give --out, --listen or both", err=True)
        raise typer.Exit(2)
    host, port = "127.0.0.1", None
    if listen is not None:
        h, _, p = listen.rpartition(":")
        host, port = h or "127.0.0.1", int(p)
    service = OverlayService(input_file, out, interval_s)
    try:
        asyncio.run(serve(service, host, port))
    except ConfigError as exc:
        raise _fail(exc) from None
