"""Who may read this operator: a client certificate of our trust domain, and, where
`allowedIdentities` is set, one of those SPIFFE IDs.

The TLS handshake already proved the client's chain to the grid CA; a CA that signs
for several trust domains (or for gateways as well as sites) still must not let every
holder read every site's load. Refusals are 403 with a JSON body, counted by reason
(`grid_signals_peer_refused_total{reason}`), and logged at most once per interval;
so are handshakes the TLS listener refused (`inbound/tls_gate.py`: plain HTTP to
the TLS port, an expired or untrusted certificate, none at all).
`/healthz` stays open (a liveness probe carries no client certificate of ours).
"""

from __future__ import annotations

import enum
import ssl
from collections.abc import Awaitable, Callable, Iterable

from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import CollectorRegistry, Counter

from gridroute.inbound.client_errors import ClientErrors, Kind
from gridroute.inbound.guard import json_error
from gridroute.inbound.tls_gate import HandshakeRefusal, OnRefused
from gridroute.wire import openai_errors as errs

OPEN_PATHS = frozenset({"/healthz"})


class PeerVerdict(enum.StrEnum):
    """Whether a client identity may read; the refusals are metric label values."""

    OK = "ok"
    NO_IDENTITY = "no_identity"
    FOREIGN_TRUST_DOMAIN = "foreign_trust_domain"
    NOT_ALLOWED = "not_allowed"


def judge(uris: Iterable[str], trust_domain: str, allowed: frozenset[str] | None) -> PeerVerdict:
    """The verdict on a certificate's URI SANs (pure: tests feed it lists)."""
    spiffe = [u for u in uris if u.startswith("spiffe://")]
    if not spiffe:
        return PeerVerdict.NO_IDENTITY
    prefix = f"spiffe://{trust_domain}/"
    ours = [u for u in spiffe if u.startswith(prefix)]
    if not ours:
        return PeerVerdict.FOREIGN_TRUST_DOMAIN
    if allowed is not None and not any(u in allowed for u in ours):
        return PeerVerdict.NOT_ALLOWED
    return PeerVerdict.OK


def peer_uris(request: web.Request) -> list[str]:
    """URI SANs of the client certificate on this request's TLS connection."""
    transport = request.transport
    obj = transport.get_extra_info("ssl_object") if transport is not None else None
    if not isinstance(obj, ssl.SSLObject | ssl.SSLSocket):
        return []
    cert = obj.getpeercert() or {}
    sans: tuple[tuple[str, str], ...] = cert.get("subjectAltName", ())  # type: ignore[assignment]
    return [str(v) for k, v in sans if k == "URI"]


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def refusal_counter(registry: CollectorRegistry | None) -> Counter:
    """`grid_signals_peer_refused_total{reason}`: a `PeerVerdict` refusal (403) or a
    refused TLS handshake (`HandshakeRefusal`: plain HTTP, an expired certificate...)."""
    return Counter(
        "grid_signals_peer_refused",
        "Requests or TLS handshakes refused because the client may not read, by reason.",
        ["reason"],
        registry=registry,
    )


def handshake_refusals(refused: Counter, errors: ClientErrors) -> OnRefused:
    """What the TLS listener does with a refused handshake: count it, log it (limited)."""

    def note(reason: HandshakeRefusal, detail: str, peer: str | None) -> None:
        refused.labels(reason.value).inc()
        errors.note(Kind.TLS_HANDSHAKE, f"{reason.value}: {detail}", peer)

    return note


def access_middleware(
    trust_domain: str,
    allowed: Iterable[str] | None,
    refused: Counter,
    errors: ClientErrors,
) -> Middleware:
    """An aiohttp middleware refusing identities outside the domain or allow-list."""
    allow = None if allowed is None else frozenset(allowed)

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS:
            return await handler(request)
        uris = peer_uris(request)
        verdict = judge(uris, trust_domain, allow)
        if verdict is not PeerVerdict.OK:
            refused.labels(verdict.value).inc()
            errors.note(Kind.FORBIDDEN_PEER, f"{verdict.value}: {', '.join(uris)[:200]}")
            return json_error(403, errs.FORBIDDEN_PEER)
        return await handler(request)

    return check
