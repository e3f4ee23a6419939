"""`signals.transport: prometheus`: a gateway's site load read from a Prometheus API.

The same signals source the operator poll is (`poll()` -> `PollOutcome`), so the
signals loop, the snapshot, the freshness and silence rules, readiness and the
`grid_signals_*` metrics (target `prometheus`) are shared; only the reading differs.
Each poll runs the instant queries of `gridroute.wire.promquery` concurrently
under one timeout (two, and a third for the gateways' own in-flight when the source
knows its gateway's site and `gateway_selector` is set), reads each answer up to
`max_response_bytes`, and decodes them.
How a poll ends, as for the operator poll:

    ok            both answers decoded (rows may still be dropped, by reason)
    unreachable   connect error, timeout, non-2xx, or an answer that is not a result
    unauthorized  401 or 403 (an authenticating proxy in front of the API)
    too_large     an answer over the byte limit, or more series than `max_series`
    bad_identity  the API's TLS certificate did not verify
"""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp

from gridroute.clock import wall
from gridroute.relay.bounded_body import BodyTooLarge, read_bounded
from gridroute.relay.poller import PollMetrics, PollOutcome, PollResult, log_change
from gridroute.relay.prometheus_link import PrometheusLink, PrometheusTLS
from gridroute.wire.promquery import (
    PromAnswerError,
    PromTooLarge,
    build_queries,
    decode_gateway_load,
    decode_rounds,
    decode_samples,
    with_rounds,
)
from gridroute.wire.signals import Decoded

log = logging.getLogger("gridroute.gateway")


def _ssl(tls: PrometheusTLS | None) -> ssl.SSLContext | None:
    """A client context for `tls`, or None for the default (system CAs for https)."""
    if tls is None:
        return None
    ctx = ssl.create_default_context(cafile=None if tls.ca_file is None else str(tls.ca_file))
    if tls.cert_file is not None and tls.key_file is not None:
        ctx.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    return ctx


TARGET = "prometheus"
"""The `target` label of this source's `grid_signals_*` series."""


class _Refused(Exception):
    def __init__(self, result: PollResult, message: str) -> None:
        super().__init__(message)
        self.result = result


class PrometheusSource:
    """Reads the configured sites' rows from a Prometheus-compatible query API."""

    def __init__(
        self,
        cfg: PrometheusLink,
        sites: Sequence[str],
        metrics: PollMetrics,
        clock: Callable[[], float] = wall,
        local_site: str | None = None,
    ) -> None:
        self.cfg = cfg
        self.sites = tuple(sorted(set(sites)))
        self.local_site = local_site
        """The reader's site, under which every gateway's report is filed (None: the
        gateways' reports are not read)."""
        selector = cfg.gateway_selector if local_site is not None else None
        self.queries = build_queries(self.sites, cfg.selector, cfg.lookback_s, selector)
        self.latest: PollOutcome | None = None
        self.failing = False
        self._metrics = metrics
        metrics.expose(TARGET)
        self._clock = clock
        self._ssl = _ssl(cfg.tls)
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(ssl=self._ssl if self._ssl is not None else True)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def poll(self) -> PollOutcome:
        """One bounded read of both queries; never raises (except cancellation)."""
        started = self._clock()
        size = 0
        try:
            exprs = [self.queries.samples, self.queries.rounds]
            if self.queries.gateways is not None:
                exprs.append(self.queries.gateways)
            async with asyncio.timeout(self.cfg.timeout_s):
                answers = await asyncio.gather(*(self._query(e) for e in exprs))
            size = sum(n for _, n in answers)
            now = self._clock()
            decoded = decode_samples(answers[0][0], self.sites, now, max_series=self.cfg.max_series)
            gateways = None
            if self.local_site is not None and len(answers) > 2:
                gateways = decode_gateway_load(
                    answers[2][0], self.local_site, now, max_series=self.cfg.max_series
                )
            decoded = with_rounds(decoded, decode_rounds(answers[1][0], self.sites), gateways)
        except _Refused as exc:
            outcome = self._failed(exc.result, started, str(exc))
        except PromTooLarge as exc:
            outcome = self._failed(PollResult.TOO_LARGE, started, str(exc))
        except ssl.SSLCertVerificationError as exc:
            outcome = self._failed(PollResult.BAD_IDENTITY, started, str(exc))
        except aiohttp.ClientConnectorCertificateError as exc:
            outcome = self._failed(PollResult.BAD_IDENTITY, started, str(exc))
        except (aiohttp.ClientError, OSError, TimeoutError, PromAnswerError, ValueError) as exc:
            message = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
            outcome = self._failed(PollResult.UNREACHABLE, started, message)
        else:
            outcome = self._ok(decoded, started, size)
        self._record(outcome)
        return outcome

    def _ok(self, decoded: Decoded, started: float, size: int) -> PollOutcome:
        return PollOutcome(
            TARGET,
            PollResult.OK,
            started,
            self._clock(),
            decoded=decoded,
            body_bytes=size,
            dropped={str(k): v for k, v in decoded.dropped.items()},
        )

    def _failed(self, result: PollResult, started: float, error: str) -> PollOutcome:
        return PollOutcome(TARGET, result, started, self._clock(), error=error)

    async def _query(self, expr: str) -> tuple[Any, int]:
        """GET /api/v1/query for `expr`; the decoded JSON and its size in bytes."""
        limit = self.cfg.max_response_bytes
        url = f"{self.cfg.url}/api/v1/query"
        async with self._session_now().get(url, params={"query": expr}) as resp:
            if resp.status in (401, 403):
                raise _Refused(PollResult.UNAUTHORIZED, f"HTTP {resp.status}")
            try:
                body = await read_bounded(resp, limit)
            except BodyTooLarge as exc:
                raise _Refused(PollResult.TOO_LARGE, str(exc)) from None
            if resp.status != 200:
                raise _Refused(PollResult.UNREACHABLE, f"HTTP {resp.status}: {_error(body)}")
        return json.loads(body), len(body)

    def _record(self, outcome: PollOutcome) -> None:
        self._metrics.count(outcome)
        self.latest = outcome
        self.failing = log_change(log, self.failing, outcome, "signals read from prometheus")


def _error(raw: bytes) -> str:
    """The API's own error text, when the body says one (bounded for the log)."""
    try:
        body = json.loads(raw)
    except ValueError:
        return "no JSON body"
    return str(body.get("error", "no error field"))[:200] if isinstance(body, dict) else "?"
