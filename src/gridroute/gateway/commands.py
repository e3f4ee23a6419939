"""CLI verbs of the gateway: `gridroute gateway`, `gridroute config schema|check`.

Imports of the gateway itself happen inside the commands, so `gridroute --help`
stays fast and other verbs do not load aiohttp.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

config_app = typer.Typer(no_args_is_help=True, help="The gateway config file: schema and checks.")


def gateway(
    config: Annotated[Path, typer.Option("--config", "-c", help="Gateway YAML config file.")],
) -> None:
    """Run the gateway: route OpenAI-compatible requests to sites."""
    from gridroute.gateway.config import ConfigError
    from gridroute.gateway.serve import serve

    try:
        code = serve(config)
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(code)


@config_app.command("schema")
def schema() -> None:
    """Print the JSON Schema of the gateway config."""
    from gridroute.gateway.config import json_schema

    typer.echo(json.dumps(json_schema(), indent=2))


@config_app.command("check")
def check(file: Annotated[Path, typer.Argument(help="Gateway YAML config file.")]) -> None:
    """Validate a gateway config; name the field of any error (exit status 2)."""
    from gridroute.gateway.config import ConfigError, load_config

    try:
        cfg = load_config(file)
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    sites = ", ".join(s.key for s in cfg.sites)
    typer.echo(f"{file}: ok ({len(cfg.models)} models, sites {sites})")
