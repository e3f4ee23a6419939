"""The one poll every site's load arrives through: a bounded, verified `/signals` reader.

Operators use it to poll their peers; gateways use the very same client to read
their local operator, so the limits, result labels, metrics and logging are written
once, here. It lives in `relay/` because it is the I/O half of the relay format (`wire/signals.py`
is the pure half) and belongs to neither process.

Every call to `SignalsClient.poll()` ends in exactly one `PollResult`:

    ok            body read, rows decoded (some rows may still be dropped, by reason)
    unreachable   connect error, timeout (also a peer that stalls mid-body), non-2xx
    unauthorized  the responder refused our client certificate, or answered 401/403
    too_large     Content-Length or the streamed body went past the read limit
    no_date       no parsable Date header: row ages could not be computed
    bad_identity  the responder's certificate is not trusted or does not name the site
    undecodable   a 200 whose body is not a relay (garbage): a failed poll, like the rest

Identity is checked the SPIFFE way: the chain must verify against the configured
CA and the leaf must carry the expected URI SAN (`spiffe://<domain>/site/<name>`);
host names are not checked, since one site's operator may move between addresses.
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import aiohttp
from prometheus_client import CollectorRegistry, Counter, Gauge

from gridroute.clock import wall
from gridroute.relay.bounded_body import BodyTooLarge, read_bounded
from gridroute.relay.tls_resumption import ResumingContext
from gridroute.tls import TLSFiles, load_context
from gridroute.wire.signals import (
    CURSOR_HEADER,
    PEER_MAX_LINES,
    PEER_MAX_PROVIDERS,
    READ_LIMIT_BYTES,
    TIME_HEADER,
    Decoded,
    DropReason,
    RelayTooLarge,
    RelayUndecodable,
    decode_relay,
)

log = logging.getLogger(__name__)

OFFSET_JUMP_S = 2.0
"""A clock offset that grows by more than this is taken as a real clock step."""


class PollResult(StrEnum):
    OK = "ok"
    UNREACHABLE = "unreachable"
    UNAUTHORIZED = "unauthorized"
    TOO_LARGE = "too_large"
    NO_DATE = "no_date"
    BAD_IDENTITY = "bad_identity"
    UNDECODABLE = "undecodable"


def client_ssl_context(
    files: TLSFiles, source: str = "operator config", *, resume: bool = False
) -> ssl.SSLContext:
    """The context a poller presents: our client certificate, the site CA, no host names.

    Capped at TLS 1.2 on purpose: under TLS 1.3 a responder that refuses our client
    certificate does so after the handshake, and the client sees a bare disconnect it
    cannot tell from a crash; under 1.2 the refusal is a handshake alert, which is
    what lets a poll end in `unauthorized` rather than `unreachable`.

    With `resume`, a `ResumingContext`: build one per target, so that a new connection
    resumes that target's last TLS session (`tls_resumption.py`).
    """
    cls = ResumingContext if resume else ssl.SSLContext
    ctx = load_context(files, source, ssl.Purpose.SERVER_AUTH, cls)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    return ctx


@dataclass(frozen=True, slots=True)
class PollLimits:
    """What one poll may cost. Defaults are the peer limits; a gateway reading its local
    operator's whole relay raises `max_lines` (`LOCAL_LIMITS`)."""

    timeout_s: float = 2.0
    """Whole poll, connect to last byte; keep it below the poll interval."""
    read_limit_bytes: int = READ_LIMIT_BYTES
    max_lines: int = PEER_MAX_LINES
    max_providers: int = PEER_MAX_PROVIDERS


LOCAL_LIMITS = PollLimits(max_lines=32_768)
"""For a gateway reading its own operator (every site's rows, under 1 MiB)."""


class PollMetrics:
    """The poll metrics, created once per registry and shared by every client in it.

    `target` is a configured site name (or `local`), so label values stay bounded.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        kw: dict[str, Any] = {} if registry is None else {"registry": registry}
        self.polls = Counter(
            "grid_signals_poll_total", "Polls of a /signals target by result.",
            ["target", "result"], **kw,
        )  # fmt: skip
        self.dropped = Counter(
            "grid_signals_ingest_dropped_total", "Rows refused at ingest by reason.",
            ["target", "reason"], **kw,
        )  # fmt: skip
        self.last_success = Gauge(
            "grid_signals_last_success_timestamp_seconds", "End of the last ok poll.",
            ["target"], **kw,
        )  # fmt: skip
        self.response_bytes = Gauge(
            "grid_signals_response_bytes", "Size of the last /signals body (read limit 1 MiB).",
            ["target"], **kw,
        )  # fmt: skip
        self.handshakes = Counter(
            "grid_signals_tls_handshakes_total",
            "New TLS connections to a /signals target: a full handshake, or a resumed session.",
            ["target", "kind"], **kw,
        )  # fmt: skip

    def count(self, outcome: PollOutcome, body_bytes: int | None = None) -> None:
        """One read's result, body size and drops, and the last success time when ok.
        Every signals source (mesh poll, NATS, a Prometheus query) counts its reads here."""
        target = outcome.target
        self.polls.labels(target, outcome.result.value).inc()
        size = outcome.body_bytes if body_bytes is None else body_bytes
        if size:
            self.response_bytes.labels(target).set(size)
        for reason, n in outcome.dropped.items():
            self.dropped.labels(target, reason).inc(n)
        if outcome.result is PollResult.OK:
            self.last_success.labels(target).set(outcome.ended_at)

    def expose(self, target: str) -> None:
        """Create `target`'s counters at zero for every result and drop reason, so
        `rate()` over them reads 0 rather than nothing before the first failure (an
        alert or panel on a series that does not exist yet cannot be told from a broken
        one)."""
        for result in PollResult:
            self.polls.labels(target, result.value)
        for reason in DropReason:
            self.dropped.labels(target, reason.value)


@dataclass(frozen=True, slots=True)
class PollOutcome:
    """How one poll ended. `decoded` is set only for `ok`."""

    target: str
    result: PollResult
    started_at: float
    ended_at: float
    decoded: Decoded | None = None
    body_bytes: int = 0
    error: str | None = None
    dropped: dict[str, int] = field(default_factory=dict)


class IdentityMismatch(aiohttp.ClientConnectionError):
    """The responder's verified certificate does not name the expected site."""


class _IdentityConnector(aiohttp.TCPConnector):
    """Checks the responder's URI SAN as each TLS connection is made, before any request
    is sent on it (so nothing, not even the path, goes to an impostor).

    Hooks aiohttp's `_create_connection`, whose (req, traces, timeout) signature has
    held across aiohttp 3.x.
    """

    def __init__(
        self, identity: str, on_handshake: Callable[[bool], None] | None = None, **kw: Any
    ) -> None:
        super().__init__(**kw)
        self._identity = identity
        self._on_handshake = on_handshake
        ctx = kw.get("ssl")
        self._resuming = ctx if isinstance(ctx, ResumingContext) else None

    async def _create_connection(self, req: Any, traces: Any, timeout: Any) -> Any:
        proto = await super()._create_connection(req, traces, timeout)
        transport = proto.transport
        sslobj = transport.get_extra_info("ssl_object") if transport is not None else None
        cert = sslobj.getpeercert() if sslobj is not None else None
        uris = [v for k, v in (cert or {}).get("subjectAltName", ()) if k == "URI"]
        if self._identity not in uris:
            if transport is not None:
                transport.close()
            raise IdentityMismatch(
                f"certificate names {', '.join(uris) or 'no URI'}, expected {self._identity}"
            )
        if sslobj is not None:
            if self._on_handshake is not None:
                self._on_handshake(bool(sslobj.session_reused))
            if self._resuming is not None:  # verified: offer this session next time
                self._resuming.session = sslobj.session
        return proto


class _Refused(Exception):
    def __init__(self, result: PollResult, message: str) -> None:
        super().__init__(message)
        self.result = result


def _classify_tls(exc: BaseException, tls: bool) -> PollResult | None:
    """Name a TLS failure, or None when the error is not about TLS.

    Our own verification failing (untrusted chain, wrong URI SAN, or a responder that
    answers plain HTTP where TLS is required) is `bad_identity`.
    The responder refusing our certificate is `unauthorized`: it shows either as a TLS
    alert or, from asyncio servers, as a reset of the connection during the handshake
    (a TCP connect never fails with a reset, so a reset while connecting with TLS is
    the handshake being dropped after our certificate was sent).
    """
    seen: BaseException | None = exc
    for _ in range(6):
        if seen is None:
            return None
        if isinstance(
            seen,
            IdentityMismatch
            | ssl.SSLCertVerificationError
            | aiohttp.ClientConnectorCertificateError,
        ):
            return PollResult.BAD_IDENTITY
        if isinstance(seen, ssl.SSLError | aiohttp.ClientSSLError):
            text = str(seen).lower()
            if "certificate verify failed" in text or "wrong version number" in text:
                return PollResult.BAD_IDENTITY  # a plain-HTTP responder proves no identity
            return PollResult.UNAUTHORIZED
        if (
            tls
            and isinstance(seen, aiohttp.ClientConnectorError)
            and isinstance(seen.os_error, ConnectionResetError | BrokenPipeError)
        ):
            return PollResult.UNAUTHORIZED
        seen = seen.__cause__ or seen.__context__
    return None


class SignalsClient:
    """Polls one `/signals` URL; keeps the latest outcome; logs only on transitions.

    `expected_identity` (a SPIFFE URI) is required of the responder's certificate
    when set; `expected_site` restricts accepted rows to that site (peers speak only
    for themselves). `clock` is the reader's wall clock (seconds).
    """

    def __init__(
        self,
        target: str,
        url: str,
        *,
        metrics: PollMetrics,
        ssl_context: ssl.SSLContext | None = None,
        expected_identity: str | None = None,
        expected_site: str | None = None,
        limits: PollLimits | None = None,
        clock: Callable[[], float] = wall,
        logger: logging.Logger = log,
        delta: bool = False,
    ) -> None:
        self.target = target
        self.url = url
        self.delta = delta
        """Send back the responder's cursor (`since=`) so a poll carries only new rows;
        the first poll and the one after a failed poll carry the whole window."""
        self.cursor: str | None = None
        self.expected_identity = expected_identity
        self.expected_site = expected_site
        self.limits = limits or PollLimits()
        self.latest: PollOutcome | None = None
        """The outcome of the most recent poll (None before the first)."""
        self.last_ok: PollOutcome | None = None
        self.failing = False
        self.offset: float | None = None
        """Reader clock minus responder clock, held steady across polls."""
        self._metrics = metrics
        metrics.expose(target)
        self._ssl = ssl_context
        self._clock = clock
        self._log = logger
        self._session: aiohttp.ClientSession | None = None
        self.extra_headers: Callable[[], Mapping[str, str]] | None = None
        """Headers for each poll, built just before it is sent (a gateway's load report)."""

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _handshake(self, resumed: bool) -> None:
        self._metrics.handshakes.labels(self.target, "resumed" if resumed else "full").inc()

    def _session_for_loop(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            ssl_arg = self._ssl if self._ssl is not None else True
            connector: aiohttp.TCPConnector
            if self.expected_identity is not None:
                connector = _IdentityConnector(
                    self.expected_identity, on_handshake=self._handshake, ssl=ssl_arg
                )
            else:
                connector = aiohttp.TCPConnector(ssl=ssl_arg)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=self.limits.timeout_s)
            )
        return self._session

    async def poll(self) -> PollOutcome:
        """One bounded poll; never raises (except cancellation)."""
        started = self._clock()
        body_bytes = 0
        try:
            decoded, body_bytes = await self._fetch()
        except _Refused as refused:
            outcome = PollOutcome(
                self.target, refused.result, started, self._clock(), error=str(refused)
            )
            if refused.result is PollResult.TOO_LARGE:
                body_bytes = self.limits.read_limit_bytes + 1
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as exc:
            result = _classify_tls(exc, self.url.startswith("https:")) or PollResult.UNREACHABLE
            message = f"{type(exc).__name__}: {exc}".strip().rstrip(":")
            outcome = PollOutcome(self.target, result, started, self._clock(), error=message)
        else:
            outcome = PollOutcome(
                self.target,
                PollResult.OK,
                started,
                self._clock(),
                decoded=decoded,
                body_bytes=body_bytes,
                dropped={str(k): v for k, v in decoded.dropped.items()},
            )
        self._record(outcome, body_bytes)
        return outcome

    async def _fetch(self) -> tuple[Decoded, int]:
        session = self._session_for_loop()
        cursor, self.cursor = self.cursor, None  # kept only if this poll succeeds
        url = self.url if cursor is None else self._url_with(cursor)
        headers = None if self.extra_headers is None else self.extra_headers()
        async with session.get(url, headers=headers) as resp:
            if resp.status in (401, 403):
                raise _Refused(PollResult.UNAUTHORIZED, f"HTTP {resp.status}")
            if resp.status != 200:
                raise _Refused(PollResult.UNREACHABLE, f"HTTP {resp.status}")
            next_cursor = resp.headers.get(CURSOR_HEADER)
            date = _parse_date(resp.headers.get("Date"))
            if date is None:
                raise _Refused(PollResult.NO_DATE, "no parsable Date header")
            received_at = self._clock()
            responder_now = _refine(date, resp.headers.get(TIME_HEADER))
            try:
                body = await read_bounded(resp, self.limits.read_limit_bytes)
            except BodyTooLarge as exc:
                raise _Refused(PollResult.TOO_LARGE, str(exc)) from None
        offset = self._steady_offset(received_at - responder_now)
        try:
            decoded = decode_relay(
                body,
                date=date,
                offset=offset,
                expected_site=self.expected_site,
                max_lines=self.limits.max_lines,
                max_providers=self.limits.max_providers,
            )
        except RelayTooLarge as exc:
            raise _Refused(PollResult.TOO_LARGE, str(exc)) from exc
        except RelayUndecodable as exc:
            raise _Refused(PollResult.UNDECODABLE, str(exc)) from exc
        if self.delta:
            self.cursor = next_cursor
        return decoded, len(body)

    def _url_with(self, cursor: str) -> str:
        if not self.delta:
            return self.url
        return f"{self.url}{'&' if '?' in self.url else '?'}since={cursor}"

    def _steady_offset(self, observed: float) -> float:
        """Keep one offset while observations only wobble by the Date's 1 s resolution.

        The offset only moves down (a tighter bound) unless it jumps up by more than
        `OFFSET_JUMP_S` (a clock step), so a row read twice never moves later in time.
        """
        self.offset = steady_offset(self.offset, observed)
        return self.offset

    def _record(self, outcome: PollOutcome, body_bytes: int) -> None:
        self._metrics.count(outcome, body_bytes)
        self.latest = outcome
        if outcome.result is PollResult.OK:
            self.last_ok = outcome
        what = f"signals poll of {self.target}"
        self.failing = log_change(self._log, self.failing, outcome, what)


def log_change(log: logging.Logger, failing: bool, outcome: PollOutcome, what: str) -> bool:
    """Whether `what` (a signals source) is failing after `outcome`, logged once per
    change ("... failing: result (error)", then "... recovered"), never once per read."""
    if outcome.result is PollResult.OK:
        if failing:
            log.info("%s recovered", what)
        return False
    if not failing:
        log.warning("%s failing: %s (%s)", what, outcome.result, outcome.error)
    return True


def steady_offset(held: float | None, observed: float) -> float:
    """The offset to keep: `held` unless `observed` is lower (a tighter bound) or jumps
    up by more than `OFFSET_JUMP_S` (a clock step), so a row never moves later."""
    if held is None or observed < held or observed > held + OFFSET_JUMP_S:
        return observed
    return held


def _refine(date: float, precise: str | None) -> float:
    """The responder's time: `X-Grid-Time` when it agrees with Date, else Date.

    Date has one-second resolution, so a row re-based with it alone can land up to a
    second in the reader's future; the millisecond header removes that error.
    """
    if precise:
        try:
            value = float(precise)
        except ValueError:
            return date
        if date <= value < date + 1.0:
            return value
    return date


def _parse_date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if parsed.tzinfo is None:
        return None
    return parsed.timestamp()


async def poll_all(clients: list[SignalsClient]) -> list[PollOutcome]:
    """Poll several targets at once (one round); each outcome is independent."""
    return list(await asyncio.gather(*(c.poll() for c in clients)))
