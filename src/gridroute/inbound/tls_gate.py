"""A TLS listener whose refused handshakes are seen: counted by reason and logged.

With `loop.create_server(ssl=...)` asyncio does the handshake out of sight: a client
speaking plain HTTP to the mTLS port, or presenting an expired certificate, is
dropped before any protocol of ours is connected, and the only trace is a debug log
(an `SSLError` is an `OSError`, which asyncio reports only in debug mode). An
operator then cannot tell "nobody polls us" from "a peer's certificate expired".

`TLSGateSite` listens in plain TCP and runs the handshake itself with
`loop.start_tls` (bounded by `handshake_timeout_s`); a handshake that fails is
named by `refusal_of` and handed to `on_refused`, and only a connection that
completed it reaches the aiohttp handler (which then sees the same TLS transport it
would have seen from `create_server(ssl=...)`: `ssl_object`, `peercert`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import ssl
from collections.abc import Callable
from typing import Any

from aiohttp import web


class HandshakeRefusal(enum.StrEnum):
    """Why a TLS handshake was refused (label values of the listener's refusal counter)."""

    PLAIN_HTTP = "plain_http"
    """The client spoke HTTP (or anything else not TLS) to the TLS port."""
    EXPIRED_CERTIFICATE = "expired_certificate"
    UNTRUSTED_CERTIFICATE = "untrusted_certificate"
    """A certificate that does not chain to the CA (or is not yet valid, or revoked)."""
    NO_CERTIFICATE = "no_certificate"
    HANDSHAKE_TIMEOUT = "handshake_timeout"
    HANDSHAKE_FAILED = "handshake_failed"
    """Any other failure (no shared protocol version or cipher, a reset mid-handshake)."""


OnRefused = Callable[[HandshakeRefusal, str, str | None], None]
"""Called with (reason, detail, peer address) for every refused handshake."""

_X509_V_ERR_CERT_HAS_EXPIRED = 10


def refusal_of(exc: BaseException) -> HandshakeRefusal:
    """Name a failed server-side handshake from the exception `start_tls` raised."""
    if isinstance(exc, TimeoutError | ConnectionAbortedError):
        return HandshakeRefusal.HANDSHAKE_TIMEOUT
    if isinstance(exc, ssl.SSLCertVerificationError):
        if exc.verify_code == _X509_V_ERR_CERT_HAS_EXPIRED:
            return HandshakeRefusal.EXPIRED_CERTIFICATE
        return HandshakeRefusal.UNTRUSTED_CERTIFICATE
    text = f"{getattr(exc, 'reason', '') or ''} {exc}".lower()
    if "http_request" in text or "http request" in text or "wrong_version" in text:
        return HandshakeRefusal.PLAIN_HTTP
    if "wrong version number" in text or "unknown_protocol" in text:
        return HandshakeRefusal.PLAIN_HTTP
    if "peer did not return a certificate" in text or "certificate_required" in text:
        return HandshakeRefusal.NO_CERTIFICATE
    if "expired" in text:
        return HandshakeRefusal.EXPIRED_CERTIFICATE
    if "certificate" in text or "unknown ca" in text:
        return HandshakeRefusal.UNTRUSTED_CERTIFICATE
    return HandshakeRefusal.HANDSHAKE_FAILED


class _Gate(asyncio.Protocol):
    """One accepted TCP connection until its handshake ends (then it is not used again)."""

    def __init__(self, site: TLSGateSite) -> None:
        self._site = site

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()  # the ClientHello stays in the socket for start_tls
        task = asyncio.get_running_loop().create_task(self._site.handshake(transport))
        self._site.pending.add(task)
        task.add_done_callback(self._site.pending.discard)

    def connection_lost(self, exc: Exception | None) -> None:
        pass  # before the handshake: start_tls sees the loss and names it


class TLSGateSite(web.TCPSite):
    """`web.TCPSite` for a TLS listener that counts and logs every refused handshake."""

    def __init__(
        self,
        runner: web.BaseRunner,
        host: str | None,
        port: int | None,
        *,
        ssl_context: ssl.SSLContext,
        on_refused: OnRefused,
        handshake_timeout_s: float = 10.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(runner, host, port, **kwargs)
        self._tls = ssl_context
        self._on_refused = on_refused
        self._handshake_timeout_s = handshake_timeout_s
        self.pending: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return f"https://{self._host}:{self._port}"

    async def start(self) -> None:
        await web.BaseSite.start(self)
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: _Gate(self),
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )
        sockets = self._server.sockets
        self._bound_port = sockets[0].getsockname()[1] if sockets else self._port

    async def handshake(self, transport: asyncio.Transport) -> None:
        """The handshake of one connection; on success the aiohttp handler takes over."""
        server = self._runner.server
        peer = transport.get_extra_info("peername")
        where = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else None
        if server is None:
            transport.abort()
            return
        protocol = server()
        loop = asyncio.get_running_loop()
        try:
            tls = await loop.start_tls(
                transport,
                protocol,
                self._tls,
                server_side=True,
                ssl_handshake_timeout=self._handshake_timeout_s,
            )
        except asyncio.CancelledError:
            transport.abort()
            raise
        except (OSError, EOFError, ValueError) as exc:
            transport.abort()
            self._on_refused(refusal_of(exc), str(exc)[:200], where)
            return
        if tls is None:  # the peer went away as the handshake ended
            transport.abort()
            return
        protocol.connection_made(tls)

    async def stop(self) -> None:
        for task in list(self.pending):
            task.cancel()
        for task in list(self.pending):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await super().stop()
