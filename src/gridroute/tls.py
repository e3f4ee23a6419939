"""TLS contexts from the PEM files a config names; a bad file is a `ConfigError`.

Every context gridroute builds (the gateway toward backends and its operator, the
operator's listener, its peer poller and its metrics scrapes) loads its files here,
and every config loader builds them once at load time (`check`), so a process
started with a wrong file, from the wrong directory or with a key of another
certificate stops with one line per problem naming the field and the path, not with
an `ssl.SSLError` traceback (or, worse, a poll loop that fails forever).

It sits beside `gridroute.config` rather than in it because `ssl` must stay out of
the simulator's reach (`sim` imports `gridroute.config`).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from gridroute.config import ConfigError, Problem


@dataclass(frozen=True, slots=True)
class Pem:
    """One PEM file and the config field (dotted path) that named it."""

    field: str
    path: str | Path


@dataclass(frozen=True, slots=True)
class TLSFiles:
    """The files of one TLS block: a CA bundle (None: the system's), a certificate and
    its key (None: no client or server certificate)."""

    ca: Pem | None = None
    cert: Pem | None = None
    key: Pem | None = None


class _Encrypted(Exception):
    """Raised from the password callback: an encrypted key would otherwise make
    OpenSSL prompt on the terminal of a daemon."""


def _no_password() -> bytes:
    raise _Encrypted


def _head(path: str | Path) -> bytes:
    try:
        with Path(path).open("rb") as f:
            return f.read(1 << 20)
    except OSError:
        return b""


def _reason(exc: BaseException) -> str:
    return getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)


def _chain_problem(cert: Pem, key: Pem | None, exc: BaseException) -> Problem:
    """Which of the two files is wrong, in words (OpenSSL only says `PEM lib`)."""
    if isinstance(exc, _Encrypted):
        p = key or cert
        return Problem(p.field, f"an encrypted private key (decrypt it first): {p.path}")
    if b"-----BEGIN CERTIFICATE-----" not in _head(cert.path):
        return Problem(cert.field, f"not a PEM certificate: {cert.path}")
    if key is not None and b"PRIVATE KEY-----" not in _head(key.path):
        return Problem(key.field, f"not a PEM private key: {key.path}")
    if "KEY_VALUES_MISMATCH" in str(exc):
        p = key or cert
        return Problem(p.field, f"not the key of the certificate {cert.path}: {p.path}")
    return Problem(cert.field, f"cannot load {cert.path}: {_reason(exc)}")


def _new_context(
    purpose: ssl.Purpose, cafile: str | None, context_class: type[ssl.SSLContext]
) -> ssl.SSLContext:
    """`ssl.create_default_context(purpose, cafile=cafile)`, of `context_class`."""
    if context_class is ssl.SSLContext:
        return ssl.create_default_context(purpose, cafile=cafile)
    server_auth = purpose is ssl.Purpose.SERVER_AUTH
    ctx = context_class(ssl.PROTOCOL_TLS_CLIENT if server_auth else ssl.PROTOCOL_TLS_SERVER)
    if cafile is None:
        ctx.load_default_certs(purpose)
    else:
        ctx.load_verify_locations(cafile)
    return ctx


def load_context(
    files: TLSFiles,
    source: str,
    purpose: ssl.Purpose = ssl.Purpose.SERVER_AUTH,
    context_class: type[ssl.SSLContext] = ssl.SSLContext,
) -> ssl.SSLContext:
    """`ssl.create_default_context(purpose)` with `files` loaded into it; of
    `context_class` (a subclass, such as a context that resumes TLS sessions).

    Raises `ConfigError` (file `source`) naming the field of the file that is wrong.
    """
    ca = files.ca
    try:
        ctx = _new_context(purpose, None if ca is None else str(ca.path), context_class)
    except (ssl.SSLError, OSError, ValueError) as exc:
        assert ca is not None  # the system store loads without raising
        if b"-----BEGIN CERTIFICATE-----" not in _head(ca.path):
            raise ConfigError.one(source, ca.field, f"not a PEM CA bundle: {ca.path}") from None
        raise ConfigError.one(source, ca.field, f"cannot load {ca.path}: {_reason(exc)}") from None
    if files.cert is not None:
        cert, key = files.cert, files.key
        try:
            ctx.load_cert_chain(
                str(cert.path), None if key is None else str(key.path), password=_no_password
            )
        except (ssl.SSLError, OSError, _Encrypted) as exc:
            raise ConfigError(source, [_chain_problem(cert, key, exc)]) from None
    return ctx


def check(source: str, blocks: Iterable[TLSFiles]) -> None:
    """Build a context from each block; every block's problem, one line each."""
    problems: list[Problem] = []
    for files in blocks:
        try:
            load_context(files, source)
        except ConfigError as exc:
            problems.extend(exc.problems)
    if problems:
        raise ConfigError(source, problems)
