"""Connection pools toward each candidate's backend (one keep-alive pool per backend).

A backend's pool is built from its `BackendSpec` and kept across reloads while the
spec is unchanged, so a SIGHUP does not drop warm connections. The pool is
`gridroute.gateway.upstream.Pool`: bytes pass through untouched (no decompression,
no headers added beyond `Host` and `Content-Length`, no cookies kept). Health probes
go through the same pool, so they test the path requests take (same TLS, same
connection limit).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from gridroute.gateway.config import TLSConfig, tls_files
from gridroute.gateway.routing import BackendSpec
from gridroute.gateway.upstream import Pool
from gridroute.tls import load_context


def ssl_context(tls: TLSConfig | None) -> ssl.SSLContext | None:
    """An SSL context for `tls` (client certificate for mutual TLS), or None for the
    default (system CAs, for an https URL; plain TCP for http)."""
    if tls is None:
        return None
    ctx = load_context(tls_files(tls), "gateway config")
    if not tls.verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


@dataclass(slots=True)
class Backend:
    """A live pool to one backend."""

    spec: BackendSpec
    pool: Pool


def open_backend(spec: BackendSpec) -> Backend:
    """Open a pool for `spec` (needs a running event loop; connects lazily)."""
    pool = Pool(
        spec.url,
        ssl_context=ssl_context(spec.tls),
        server_hostname=spec.tls.server_name if spec.tls is not None else None,
        limit=spec.max_connections,
        connect_timeout_s=spec.connect_timeout_s,
        read_timeout_s=spec.read_timeout_s,
    )
    return Backend(spec, pool)


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
                await backend.pool.close(graceful=True)  # answers in flight finish

    async def close(self) -> None:
        for backend in self.by_key.values():
            await backend.pool.close()
        self.by_key = {}
