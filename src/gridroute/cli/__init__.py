"""The `gridroute` command line: one verb per process or tool."""

from __future__ import annotations

import typer

from gridroute.cli.config import app as config_app
from gridroute.cli.sim import app as sim_app
from gridroute.control.cli import traffic_app, trafficmap_app
from gridroute.demo.cli import demo
from gridroute.fakeserver.cli import fake_server
from gridroute.gateway.commands import gateway
from gridroute.operator.cli import certs_app, operator_command

app = typer.Typer(
    no_args_is_help=True, add_completion=False, help="gridroute: cross-site LLM routing."
)
app.command("fake-server")(fake_server)
app.command("operator")(operator_command)
app.add_typer(certs_app, name="certs")
app.add_typer(sim_app, name="sim")
app.command("gateway")(gateway)
app.add_typer(config_app, name="config")
app.command("demo")(demo)
app.add_typer(trafficmap_app, name="trafficmap")
app.add_typer(traffic_app, name="traffic")


@app.command()
def version() -> None:
    """Print the version."""
    from gridroute import __version__

    typer.echo(__version__)


def main() -> None:
    app()
