"""CLI verb of the gateway: `gridroute gateway`.

Imports of the gateway itself happen inside the command, so `gridroute --help`
stays fast and other verbs do not load aiohttp.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def gateway(
    config: Annotated[Path, typer.Option("--config", "-c", help="Gateway YAML config file.")],
) -> None:
    """Run the gateway: route OpenAI-compatible requests to sites."""
    from gridroute.config import ConfigError
    from gridroute.gateway.serve import serve

    try:
        code = serve(config)
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    raise typer.Exit(code)
