"""TLS contexts for the operator: mutual TLS both ways, identity by SPIFFE URI SAN.

The listener requires a client certificate chained to the site CA (CERT_REQUIRED);
the poller presents this site's client certificate and requires the peer's chain to
verify (TLS 1.2 at most, see `client_ssl_context`). Host names are not checked: the
poller checks the URI SAN (`gridroute.relay.poller.spiffe_id`) instead, as SPIFFE
prescribes.
"""

from __future__ import annotations

import ssl

from gridroute.operator.config import TLSFiles, client_files, server_files
from gridroute.relay.poller import client_ssl_context
from gridroute.tls import load_context

SOURCE = "operator config"
"""What a TLS error names as its file when the config's path is not at hand (the
config was checked at load, so this is for files changed since)."""


def server_context(tls: TLSFiles) -> ssl.SSLContext:
    """Serve with this site's certificate; require a client certificate from the CA."""
    ctx = load_context(server_files(tls), SOURCE, ssl.Purpose.CLIENT_AUTH)
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(tls: TLSFiles, *, resume: bool = False) -> ssl.SSLContext:
    """Poll with this site's client certificate; require a peer chain to the CA. With
    `resume`, one context per peer that resumes its last TLS session."""
    return client_ssl_context(client_files(tls), SOURCE, resume=resume)
