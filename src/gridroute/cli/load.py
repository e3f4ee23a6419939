"""`gridroute load`: closed-loop OpenAI traffic at a gateway (or any OpenAI server).

The face of `gridroute.load.generator.run_load`: `--clients` workers each send their
next request as soon as the last one ended, for `--duration` seconds or `--requests`
requests. While it runs a progress line (stderr) counts what came back; at the end a
table (stdout) gives requests, ok, 429, failed, req/s, latency p50/p99 and each site's
share of the successful answers, by the `x-grid-site` header the gateway adds (a fake
server's `x-fake-server` when there is no gateway). `--json FILE` writes the same
summary as JSON. Exit 0 when at least one request succeeded, else 1 (a wrong URL or
model shows as a failed run, not as a table of zeros).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Annotated, Literal

import typer
from rich.console import Console
from rich.table import Table

from gridroute.load.result import LoadResult, RequestOutcome, RequestRecord

DEFAULT_URL = "http://127.0.0.1:8080"


def first_model(base_url: str, timeout_s: float = 5.0) -> str:
    """The first model `GET {base_url}/v1/models` lists (what a gateway serves)."""
    url = base_url.rstrip("/").removesuffix("/v1") + "/v1/models"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            data = json.loads(resp.read())
    except (OSError, urllib.error.URLError, ValueError) as exc:
        raise LookupError(f"GET {url} failed ({exc}); give --model") from None
    models = [m.get("id") for m in data.get("data", []) if isinstance(m, dict)]
    if not models or not isinstance(models[0], str):
        raise LookupError(f"GET {url} lists no model; give --model")
    return models[0]


class Progress:
    """Counts of what came back so far, as one line."""

    def __init__(self, clients: int) -> None:
        self.clients = clients
        self.counts: Counter[RequestOutcome] = Counter()
        self.started = time.monotonic()

    def add(self, rec: RequestRecord) -> None:
        self.counts[rec.outcome] += 1

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        ok = self.counts[RequestOutcome.OK]
        rate = ok / elapsed if elapsed > 0 else 0.0
        return (
            f"[{elapsed:6.1f}s] {self.clients} clients  ok {ok}  "
            f"429 {self.counts[RequestOutcome.SHED]}  failed {self.counts[RequestOutcome.FAILED]}"
            f"  other 4xx {self.counts[RequestOutcome.CLIENT_ERROR]}  {rate:.0f} req/s"
        )


def _seconds(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.3f}"


def summary_tables(result: LoadResult, url: str, model: str) -> tuple[Table, Table]:
    """The totals row and the per-site shares, as rich tables."""
    totals = Table(title=f"gridroute load: {url} (model {model})", title_justify="left")
    for name in ("requests", "ok", "429", "failed", "other 4xx", "req/s", "p50 s", "p99 s"):
        totals.add_column(name, justify="right")
    rate = result.ok / result.duration_s if result.duration_s > 0 else 0.0
    totals.add_row(
        str(len(result.records)),
        str(result.ok),
        str(result.shed),
        str(result.failed),
        str(result.count(RequestOutcome.CLIENT_ERROR)),
        f"{rate:.1f}",
        _seconds(result.latency_s(0.5)),
        _seconds(result.latency_s(0.99)),
    )
    sites = Table(title="ok answers by x-grid-site", title_justify="left")
    sites.add_column("site")
    sites.add_column("ok", justify="right")
    sites.add_column("share", justify="right")
    for site, n in result.per_site.items():
        sites.add_row(site, str(n), f"{result.shares[site]:.3f}")
    return totals, sites


def load(
    url: Annotated[str, typer.Option(help="Base URL of the gateway (with or without /v1).")] = (
        DEFAULT_URL
    ),
    model: Annotated[
        str | None, typer.Option(help="Model to ask for; default: the first of GET /v1/models.")
    ] = None,
    clients: Annotated[int, typer.Option(min=1, help="Closed-loop clients.")] = 8,
    duration: Annotated[float, typer.Option(min=0.0, help="Seconds of traffic.")] = 10.0,
    requests: Annotated[
        int | None, typer.Option(min=1, help="Stop after this many requests (default: no cap).")
    ] = None,
    stream: Annotated[bool, typer.Option("--stream", help="Ask for SSE streams.")] = False,
    api: Annotated[
        str, typer.Option(help="chat (/v1/chat/completions) or completions (/v1/completions).")
    ] = "chat",
    max_tokens: Annotated[
        int | None, typer.Option(help="max_tokens of each request (default: not sent).")
    ] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the summary as JSON to this file.")
    ] = None,
    progress_s: Annotated[
        float, typer.Option("--progress", help="Seconds between progress lines (0: none).")
    ] = 1.0,
) -> None:
    """Send closed-loop OpenAI traffic and print what came back, per site."""
    from gridroute.load.generator import run_load

    if api not in ("chat", "completions"):
        raise typer.BadParameter(f"--api: expected chat or completions, got {api!r}")
    err = Console(stderr=True, highlight=False)
    try:
        chosen = model or first_model(url)
    except LookupError as exc:
        err.print(f"gridroute load: {exc}")
        raise typer.Exit(1) from None
    progress = Progress(clients)
    api_kind: Literal["chat", "completions"] = "chat" if api == "chat" else "completions"

    async def main() -> LoadResult:
        async def report() -> None:
            while True:
                await asyncio.sleep(progress_s)
                err.print(progress.line())

        ticker = asyncio.create_task(report()) if progress_s > 0 else None
        try:
            return await run_load(
                url, model=chosen, clients=clients, duration_s=duration, requests=requests,
                stream=stream, api=api_kind, max_tokens=max_tokens, on_record=progress.add,
            )  # fmt: skip
        finally:
            if ticker is not None:
                ticker.cancel()
                err.print(progress.line())  # the last one: every request counted

    result = asyncio.run(main())
    out = Console(highlight=False)
    for table in summary_tables(result, url, chosen):
        out.print(table)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({"url": url, "model": chosen, **result.summary()}) + "\n")
    if result.ok == 0:
        err.print("gridroute load: no request succeeded")
        raise typer.Exit(1)
