"""Optional API keys at the gateway: `auth.api_keys_file`, one key per line.

Keys are kept only as SHA-256 digests, and a presented key is checked against every
digest with `hmac.compare_digest` (no early exit, no comparison that stops at the first
differing byte), so timing tells a client nothing about how close its guess was.
Neither keys nor digests are logged: errors about the file name the file and a line
number only. The file is read at start and again on SIGHUP.
"""

from __future__ import annotations

import hashlib
import hmac
from pathlib import Path

from aiohttp import web

from gridroute.config import ConfigError, read_text


class KeysFileError(ConfigError):
    """An API keys file that cannot be used (the message never quotes a key)."""


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


class ApiKeys:
    """The accepted keys, as digests; `allows(request)` is the check."""

    def __init__(self, keys: list[str]) -> None:
        self._digests = tuple(_digest(k) for k in keys)

    def __len__(self) -> int:
        return len(self._digests)

    @staticmethod
    def load(path: str | Path) -> ApiKeys:
        """Read a keys file: one key per line; blank lines and `#` comments skipped."""
        field = "auth.api_keys_file"
        p = Path(path)
        try:
            text = read_text(p, field)
        except ConfigError as exc:
            raise KeysFileError(exc.file, exc.problems) from None
        keys: list[str] = []
        for number, raw in enumerate(text.splitlines(), 1):
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if any(c.isspace() for c in line) or len(line) < 16:
                reason = "a key is one word of at least 16 characters"
                raise KeysFileError.one(f"{p}:{number}", field, reason)
            keys.append(line)
        if not keys:
            raise KeysFileError.one(str(p), field, "no keys")
        return ApiKeys(keys)

    def allows_key(self, key: str) -> bool:
        presented = _digest(key)
        ok = False
        for d in self._digests:
            ok |= hmac.compare_digest(presented, d)
        return ok

    def allows(self, request: web.BaseRequest) -> bool:
        """True when the request carries `Authorization: Bearer <one of the keys>`."""
        return self.allows_header(request.headers.get("Authorization", ""))

    def allows_header(self, header: str) -> bool:
        """True when `header` (an `Authorization` value) is `Bearer <one of the keys>`."""
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer":
            return False
        return self.allows_key(key.strip())
