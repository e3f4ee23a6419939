"""`gridroute wait URL`: block until a URL answers 2xx, e.g. a gateway's `/readyz`.

What a script (or the README) needs between starting a server in the background and
using it: `gridroute gateway --config g.yaml & gridroute wait http://127.0.0.1:8080/readyz`.
It polls every `--interval` seconds with a short per-request timeout; any 2xx ends the
wait with exit 0. Host names are verified (`--cacert` for a private CA; `--cert` and
`--key` present a client certificate to a mutual-TLS operator). On `--timeout` it exits
1 with one line naming the URL and what the last try got (a status, "connection
refused", a TLS error), so a failed start says why.
"""

from __future__ import annotations

import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated

import typer


def probe(url: str, timeout_s: float, context: ssl.SSLContext | None = None) -> str | None:
    """None when `url` answered 2xx, else what it answered instead (for the message)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s, context=context) as resp:
            resp.read()
            return None if 200 <= resp.status < 300 else f"HTTP {resp.status}"
    except urllib.error.HTTPError as exc:
        exc.close()
        return f"HTTP {exc.code}"
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, ConnectionRefusedError):
            return "connection refused"
        return str(reason)
    except (OSError, ValueError) as exc:  # reset, timeout, a malformed answer
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def wait_for(
    url: str,
    timeout_s: float,
    interval_s: float = 0.2,
    context: ssl.SSLContext | None = None,
) -> str | None:
    """Poll `url` until it answers 2xx (None) or `timeout_s` passed (the last failure)."""
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        last = probe(url, max(0.1, min(2.0, remaining)), context)
        if last is None:
            return None
        if time.monotonic() + interval_s > deadline:
            return last
        time.sleep(interval_s)


def wait(
    url: Annotated[str, typer.Argument(help="http(s) URL that answers 2xx when ready.")],
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds to wait before giving up (exit 1).")
    ] = 60.0,
    interval: Annotated[float, typer.Option(help="Seconds between tries.")] = 0.2,
    cacert: Annotated[
        Path | None, typer.Option(help="CA bundle for an https URL (default: the system's).")
    ] = None,
    cert: Annotated[
        Path | None, typer.Option(help="Client certificate, for a mutual-TLS server.")
    ] = None,
    key: Annotated[Path | None, typer.Option(help="Key of --cert.")] = None,
) -> None:
    """Wait until URL answers 2xx (exit 0), or say what it answered and exit 1."""
    if not url.startswith(("http://", "https://")):
        typer.echo(f"gridroute wait: {url!r}: expected an http:// or https:// URL", err=True)
        raise typer.Exit(2)
    context = None
    if cacert or cert:
        context = ssl.create_default_context(cafile=str(cacert) if cacert else None)
        if cert:
            context.load_cert_chain(str(cert), str(key) if key else None)
    last = wait_for(url, timeout, interval, context)
    if last is not None:
        typer.echo(f"gridroute wait: {url} did not answer 2xx within {timeout:g} s "
                   f"(last try: {last})", err=True)  # fmt: skip
        raise typer.Exit(1)
