"""CLI verbs of this package: `gridroute operator` and `gridroute certs init`.

Heavy imports happen inside the commands so `gridroute --help` stays fast.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer

certs_app = typer.Typer(
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Site certificates for mutual TLS.",
)


def operator_command(
    config: Annotated[Path, typer.Option("--config", "-c", help="operator.yaml")],
    log_level: Annotated[str, typer.Option(help="DEBUG, INFO, WARNING")] = "INFO",
) -> None:
    """Run a site operator: scrape providers, poll peers, serve /signals."""
    import asyncio

    from gridroute.config import ConfigError
    from gridroute.logs import setup_logging
    from gridroute.operator.config import load_config
    from gridroute.operator.service import Operator

    setup_logging(log_level)
    try:
        cfg = load_config(config)
    except ConfigError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(Operator(cfg).run_forever())


@certs_app.command("init")
def certs_init(
    sites: Annotated[str, typer.Option(help="Comma-separated site names, e.g. hub,west,east")],
    out: Annotated[Path, typer.Option(help="Directory to write ca.* and <site>/* into")],
    trust_domain: Annotated[str, typer.Option(help="SPIFFE trust domain")] = "gridroute.local",
    host: Annotated[
        list[str] | None,
        typer.Option(
            "--host",
            help="Extra DNS name or IP for the server certificates (repeatable); "
            "localhost and 127.0.0.1 are always in.",
        ),
    ] = None,
) -> None:
    """Make a CA and per-site server and client certificates (SPIFFE URI SAN per site)."""
    from gridroute.operator.certs import init_certs

    names = [s.strip() for s in sites.split(",") if s.strip()]
    if not names:
        typer.echo("--sites: give at least one site name", err=True)
        raise typer.Exit(2)
    init_certs(out, names, trust_domain, tuple(host or ()))
    for name in names:
        typer.echo(f"{out}/{name}/server.crt, client.crt: spiffe://{trust_domain}/site/{name}")
