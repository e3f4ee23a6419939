"""Whose request is it: the fairness key that fair admission (`core/fairness.py`) ranks.

`fairness_key` in the gateway config says where the key comes from:

    api_key        the bearer token of `Authorization` (the default; a gateway without
                   API keys sees none and falls back to the address)
    user           the OpenAI `user` field of the body
    header:<name>  a request header, e.g. `header:x-tenant`
    address        the client's address

A key that is absent, empty or longer than `MAX_KEY_CHARS` falls back to the client
address, so a client cannot escape its standing by sending garbage, and cannot make the
table hold long strings. API keys are kept only as a digest (the table must not hold
secrets). A key is never a metric label or a log field.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

MAX_KEY_CHARS = 256
"""Longest key taken as it is; a longer one falls back to the address."""

SOURCES = ("api_key", "user", "address")
HEADER_PREFIX = "header:"


def valid_source(source: str) -> bool:
    """Whether `source` is one of the kinds above (a header name must be non-empty)."""
    if source.startswith(HEADER_PREFIX):
        name = source[len(HEADER_PREFIX) :]
        return bool(name) and all(c.isalnum() or c in "-_" for c in name)
    return source in SOURCES


def _usable(value: str | None) -> bool:
    return value is not None and 0 < len(value) <= MAX_KEY_CHARS


def fairness_key(source: str, headers: Mapping[str, str], remote: str | None, body: bytes) -> str:
    """The request's fairness key by `source`, else its address (`addr:` prefixed)."""
    if source == "api_key":
        scheme, _, token = headers.get("Authorization", "").partition(" ")
        token = token.strip()
        if scheme.lower() == "bearer" and _usable(token):
            return "key:" + hashlib.sha256(token.encode()).hexdigest()[:32]
    elif source == "user":
        user = _user(body)
        if _usable(user):
            return f"user:{user}"
    elif source.startswith(HEADER_PREFIX):
        value = headers.get(source[len(HEADER_PREFIX) :])
        if _usable(value):
            return f"hdr:{value}"
    return f"addr:{remote or ''}"


def _user(body: bytes) -> str | None:
    if b'"user"' not in body:
        return None
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    user = doc.get("user") if isinstance(doc, dict) else None
    return user if isinstance(user, str) else None
