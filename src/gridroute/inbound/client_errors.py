"""Client errors: counted always, logged at most once per interval per class.

A malformed request is the client's problem, not the operator's: a line (let alone a
traceback) per request lets any client fill the disk. Each class is a small fixed
set (`Kind`), so it is also a bounded metric label.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter


class Kind(enum.StrEnum):
    """Why a client's request or connection was refused (a metric label value)."""

    HEADER_TIMEOUT = "header_timeout"
    BODY_TIMEOUT = "body_timeout"
    IDLE_TIMEOUT = "idle_timeout"
    CONNECTION_LIMIT = "connection_limit"
    BAD_REQUEST = "bad_request"
    HEADERS_TOO_LARGE = "headers_too_large"
    INVALID_JSON = "invalid_json"
    MISSING_MODEL = "missing_model"
    BODY_TOO_LARGE = "body_too_large"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    UNAUTHORIZED = "unauthorized"
    FORBIDDEN_PEER = "forbidden_peer"
    TLS_HANDSHAKE = "tls_handshake"
    """A TLS handshake refused (plain HTTP to the TLS port, a bad certificate)."""
    INTERNAL = "internal"


class ClientErrors:
    """`{prefix}_client_errors_total{kind}` and the rate-limited log of the same events."""

    def __init__(
        self,
        registry: CollectorRegistry | None,
        prefix: str,
        *,
        interval_s: float = 60.0,
        logger: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.counter = Counter(
            f"{prefix}_client_errors",
            "Client requests or connections refused or closed, by kind; "
            "idle_timeout counts idle kept-alive connections closed (not an error).",
            ["kind"],
            registry=registry,
        )
        self._children = {k: self.counter.labels(k.value) for k in Kind}
        self.interval_s = interval_s
        self._log = logger or logging.getLogger("gridroute.clients")
        self._clock = clock
        self._last: dict[Kind, float] = {}
        self._unlogged: dict[Kind, int] = dict.fromkeys(Kind, 0)
        self.counts: dict[Kind, int] = dict.fromkeys(Kind, 0)
        """Totals per kind (what tests and /status read without a scrape)."""

    def note(self, kind: Kind, detail: str = "", peer: str | None = None) -> None:
        """Count one event; log it unless this kind was logged within the interval.

        `detail` must not carry secrets (it is logged): a parser message, a path."""
        self._children[kind].inc()
        self.counts[kind] += 1
        self._unlogged[kind] += 1
        if kind is Kind.IDLE_TIMEOUT:
            return  # routine: counted, never logged
        now = self._clock()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval_s:
            return
        self._last[kind] = now
        n = self._unlogged[kind]
        self._unlogged[kind] = 0
        self._log.warning(
            "client error %s%s%s (%d since the last line of this kind; at most one line per %gs)",
            kind.value,
            f" from {peer}" if peer else "",
            f": {detail[:200]}" if detail else "",
            n,
            self.interval_s,
            extra={"event": "client_error", "kind": kind.value, "count": n},
        )
