"""The `gridroute` command line: one verb per process or tool.

Help is plain text (`rich_markup_mode=None`, inherited by every sub-command): in
rich mode a help string's `[auto]` or `[default: 60% of all slots]` is read as markup
and vanishes, and every flag shows as `--serve <bool>`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from gridroute.cli.config import app as config_app
from gridroute.cli.load import load
from gridroute.cli.overlay import app as overlay_app
from gridroute.cli.overlay import control
from gridroute.cli.sim import app as sim_app
from gridroute.cli.wait import wait
from gridroute.control.cli import traffic_app, trafficmap_app
from gridroute.demo.cli import demo
from gridroute.fakeserver.cli import fake_server
from gridroute.gateway.commands import gateway
from gridroute.operator.cli import certs_app, operator_command

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    help="gridroute: cross-site LLM routing.",
)
app.command("fake-server")(fake_server)
app.command("operator")(operator_command)
app.add_typer(certs_app, name="certs")
app.add_typer(sim_app, name="sim")
app.command("gateway")(gateway)
app.add_typer(config_app, name="config")
app.command("demo")(demo)
app.command("wait")(wait)
app.command("load")(load)
app.add_typer(trafficmap_app, name="trafficmap")
app.add_typer(traffic_app, name="traffic")
app.add_typer(overlay_app, name="overlay")
app.command("control")(control)


def _print_version(value: bool) -> None:
    if value:
        from gridroute import __version__

        typer.echo(f"gridroute {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_print_version, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """gridroute: cross-site LLM routing."""


@app.command()
def version() -> None:
    """Print the version."""
    from gridroute import __version__

    typer.echo(__version__)


def main() -> None:
    app()
