"""TLS session resumption for peer polls: a new connection to a peer skips the full
handshake.

Peer polls keep their connection alive, and a poll outlives its round rather than
dropping it (`operator/peer_rounds.py`). A connection is still lost now and then: a
poll given up after a few intervals, a peer restarted, an idle close. The new one
used to pay a full TLS handshake on both ends (certificate chains sent and verified,
an ECDHE exchange and signatures), the cost that fed wave 1's metastable collapse at
40 sites. With the session of the last connection offered again, the peer resumes it
(TLS 1.2 session tickets, which Python's servers issue by default): an abbreviated
handshake with no certificates and no signatures.

asyncio's TLS layer creates each connection's `SSLObject` through
`SSLContext.wrap_bio` and offers no way to pass a session, so `ResumingContext` (one
per peer: a session belongs to one server) passes its last session there. The
poller stores the session of each connection whose peer identity it verified
(`relay/poller.py`). A resumed session still carries the peer's certificate, so the
identity check runs on every connection, resumed or not.
"""

from __future__ import annotations

import ssl
from typing import Any


class ResumingContext(ssl.SSLContext):
    """A client context that offers `session` (its one peer's last) on each new
    connection; the server resumes it or falls back to a full handshake."""

    session: ssl.SSLSession | None = None

    def wrap_bio(
        self,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        server_side: bool = False,
        server_hostname: str | bytes | None = None,
        session: ssl.SSLSession | None = None,
    ) -> Any:
        if not server_side and session is None:
            session = self.session
        return super().wrap_bio(incoming, outgoing, server_side, server_hostname, session)
