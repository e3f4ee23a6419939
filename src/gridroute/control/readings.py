"""Live inputs from gridroute's own operators: each home's ready replicas (from the
operator's `/status`) and its capacity report (`{servable, observedAt}`, when capacity
polling is on).

An operator that cannot be read leaves the last ready count standing for
`READY_HOLD_S`, then the home counts 0 ready: a control-plane blip does not move traffic,
a site that stays dark stops getting it. Capacity attempts are kept raw (report or
error); `core.capacityreport` decides what they allow.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from gridroute.control.config import CapacityPolling, OperatorRef, OperatorTLS
from gridroute.core.capacityreport import Attempt, CapacityReport

READY_HOLD_S = 30.0


@dataclass(frozen=True, slots=True)
class ReadyReading:
    ready: int
    at: float


class ReadingError(Exception):
    """An operator answer that is not what was asked for."""


def operator_ssl(tls: OperatorTLS | None, base: Path) -> ssl.SSLContext | None:
    """The client context for https operators (their server names are checked)."""
    if tls is None:
        return None

    def at(p: Path) -> str:
        return str(p if p.is_absolute() else base / p)

    ctx = ssl.create_default_context(cafile=at(tls.ca))
    ctx.load_cert_chain(at(tls.cert), at(tls.key))
    return ctx


async def _get_json(
    session: aiohttp.ClientSession,
    url: str,
    timeout_s: float,
    tls: ssl.SSLContext | None,
    method: str = "GET",
) -> Any:
    """The JSON body `method` (GET, HEAD, or POST with an empty body) answers with."""
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    data = b"" if method == "POST" else None
    async with session.request(
        method, url, data=data, timeout=timeout, ssl=tls if tls is not None else True
    ) as resp:
        if resp.status != 200:
            raise ReadingError(f"{method} {url}: {resp.status}")
        if method == "HEAD":
            raise ReadingError(f"HEAD {url}: a HEAD answer carries no report")
        return await resp.json(content_type=None)


async def read_ready(
    session: aiohttp.ClientSession,
    ref: OperatorRef,
    timeout_s: float,
    tls: ssl.SSLContext | None = None,
) -> int:
    """Ready endpoints of `ref.provider` in the operator's latest sample (0 without one)."""
    status = await _get_json(session, ref.url.rstrip("/") + "/status", timeout_s, tls)
    for provider in status.get("providers", []):
        if provider.get("name") == ref.provider:
            latest = provider.get("latest") or {}
            ready = latest.get("ready")
            if not isinstance(ready, int | float) or not math.isfinite(ready):
                return 0
            return max(int(ready), 0)
    raise ReadingError(f"operator {ref.url} has no provider {ref.provider!r}")


def parse_report(body: Any) -> CapacityReport:
    """`{servable, observedAt}` (observedAt RFC 3339, or seconds since the epoch)."""
    if not isinstance(body, dict) or set(body) - {"servable", "observedAt"}:
        raise ReadingError("capacity report must be {servable, observedAt}")
    servable, observed = body.get("servable"), body.get("observedAt")
    if not isinstance(servable, int) or isinstance(servable, bool) or servable < 0:
        raise ReadingError(f"servable must be a non-negative integer, got {servable!r}")
    if isinstance(observed, int | float) and not isinstance(observed, bool):
        at = float(observed)
    elif isinstance(observed, str):
        try:
            at = dt.datetime.fromisoformat(observed.replace("Z", "+00:00")).timestamp()
        except ValueError:
            raise ReadingError(f"observedAt is not a time: {observed!r}") from None
    else:
        raise ReadingError(f"observedAt is missing or not a time: {observed!r}")
    return CapacityReport(servable, at)


async def read_capacity(
    session: aiohttp.ClientSession,
    ref: OperatorRef,
    polling: CapacityPolling,
    tls: ssl.SSLContext | None = None,
) -> Attempt:
    """One capacity poll of a home's operator (`polling.method`; a POST sends an empty
    body): the report, or why there is none."""
    url = ref.url.rstrip("/") + polling.path.replace("{provider}", ref.provider)
    try:
        body = await _get_json(session, url, polling.timeout_seconds, tls, polling.method)
        return Attempt(parse_report(body))
    except TimeoutError:
        return Attempt(None, "timed out")
    except (aiohttp.ClientError, OSError, ValueError, ReadingError) as exc:
        return Attempt(None, str(exc) or type(exc).__name__)
    except asyncio.CancelledError:
        raise
