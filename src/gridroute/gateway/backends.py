"""Connection pools toward each candidate's backend (one keep-alive pool per backend).

A backend's pool is built from its `BackendSpec` and kept across reloads while the
spec is unchanged, so a SIGHUP does not drop warm connections. Sessions pass bytes
through untouched: no automatic decompression, no default headers added, no cookies
kept between clients.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from gridroute.gateway.config import TLSConfig
from gridroute.gateway.routing import BackendSpec

_SKIP_AUTO = frozenset({"User-Agent", "Accept", "Accept-Encoding", "Content-Type"})
"""Headers aiohttp would add to a request that lacks them; the gateway adds none."""
_SKIP_TABLE: CIMultiDict[None] = CIMultiDict((h, None) for h in sorted(_SKIP_AUTO))


class PassThroughRequest(aiohttp.ClientRequest):
    """A client request that adds no headers of its own, decided once, not per request.

    Passing `skip_auto_headers` makes aiohttp rebuild the same skip table (sort, copy,
    merge) for every request: about 3 % of the gateway's CPU per request. The table
    never changes, so it is built once. Every auto header aiohttp knows
    (`DEFAULT_HEADERS`, `User-Agent`, a payload's `Content-Type`) is in it, which is
    what makes skipping the per-request merge equivalent; `request_class()` falls back
    to the stock class and `skip_auto_headers` if aiohttp's internals differ.
    """

    def update_auto_headers(self, skip_auto_headers: object) -> None:
        self._skip_auto_headers = _SKIP_TABLE


def request_class() -> tuple[type[aiohttp.ClientRequest], frozenset[str] | None]:
    """The request class and session `skip_auto_headers` to use with this aiohttp."""
    stock = aiohttp.ClientRequest
    known = {h.lower() for h in (*stock.DEFAULT_HEADERS, "User-Agent", "Content-Type")}
    if (
        hasattr(stock, "_skip_auto_headers")
        and hasattr(stock, "update_auto_headers")
        and known <= {h.lower() for h in _SKIP_AUTO}
    ):
        return PassThroughRequest, None
    return stock, _SKIP_AUTO  # pragma: no cover - another aiohttp


_REQUEST_CLASS, _SESSION_SKIP = request_class()

_BODY_HEADERS: CIMultiDict[str] = CIMultiDict({"Content-Type": "application/octet-stream"})
"""A body payload's own headers: aiohttp requires some, and skips this one (in the skip
table), so the client's `Content-Type`, or none, goes upstream."""


class PassThroughBody(aiohttp.BytesPayload):
    """The client's body, as the request payload, built without aiohttp's per-request
    work: `data=bytes` looks the type up in the payload registry and builds a header
    table for every request (about 3 % of the gateway's samples on small requests)."""

    def __init__(self, value: bytes) -> None:  # no super().__init__: see above
        self._value = value
        self._size = len(value)
        self._encoding = None
        self._filename = None
        self._headers = _BODY_HEADERS


def ssl_context(tls: TLSConfig | None) -> ssl.SSLContext | bool:
    """An SSL context for `tls` (client certificate for mutual TLS), or default verification."""
    if tls is None:
        return True
    ctx = ssl.create_default_context(cafile=tls.ca_file)
    if tls.cert_file and tls.key_file:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    if not tls.verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


@dataclass(slots=True)
class Backend:
    """A live pool to one backend, and the absolute URLs of the API paths on it."""

    spec: BackendSpec
    session: aiohttp.ClientSession
    base: URL
    server_hostname: str | None
    _urls: dict[str, URL] = field(default_factory=dict)

    def url(self, path_qs: str) -> URL:
        """The backend URL for a request path (with query), cached per distinct path."""
        u = self._urls.get(path_qs)
        if u is None:
            u = URL(str(self.base) + path_qs, encoded=True)
            if len(self._urls) < 64:
                self._urls[path_qs] = u
        return u


def open_backend(spec: BackendSpec) -> Backend:
    """Open a pool for `spec` (needs a running event loop)."""
    connector = aiohttp.TCPConnector(
        limit=spec.max_connections,
        limit_per_host=0,
        ssl=ssl_context(spec.tls),
        keepalive_timeout=30.0,
        ttl_dns_cache=60,
    )
    timeout = aiohttp.ClientTimeout(
        total=None, connect=None, sock_connect=spec.connect_timeout_s, sock_read=spec.read_timeout_s
    )
    session = aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        auto_decompress=False,
        skip_auto_headers=_SESSION_SKIP,
        request_class=_REQUEST_CLASS,
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
    )
    hostname = spec.tls.server_name if spec.tls is not None else None
    return Backend(spec, session, URL(spec.url), hostname)


class Backends:
    """Pools by candidate key; `sync` opens new ones and closes those no longer needed."""

    def __init__(self) -> None:
        self.by_key: dict[str, Backend] = {}

    async def sync(self, specs: dict[str, BackendSpec]) -> None:
        old = self.by_key
        new: dict[str, Backend] = {}
        for key, spec in specs.items():
            have = old.get(key)
            new[key] = have if have is not None and have.spec == spec else open_backend(spec)
        self.by_key = new
        for key, backend in old.items():
            if new.get(key) is not backend:
                await backend.session.close()

    async def close(self) -> None:
        for backend in self.by_key.values():
            await backend.session.close()
        self.by_key = {}
