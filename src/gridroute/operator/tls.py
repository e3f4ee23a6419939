"""TLS contexts for the operator: mutual TLS both ways, identity by SPIFFE URI SAN.

The listener requires a client certificate chained to the site CA (CERT_REQUIRED);
the poller presents this site's client certificate and requires the peer's chain to
verify (TLS 1.2 at most, see `client_ssl_context`). Host names are not checked: the
poller checks the URI SAN (`gridroute.relay.poller.spiffe_id`) instead, as SPIFFE
prescribes.
"""

from __future__ import annotations

import ssl

from gridroute.operator.config import TLSFiles
from gridroute.relay.poller import client_ssl_context


def server_context(tls: TLSFiles) -> ssl.SSLContext:
    """Serve with this site's certificate; require a client certificate from the CA."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(tls.ca))
    ctx.load_cert_chain(str(tls.cert), str(tls.key))
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(tls: TLSFiles) -> ssl.SSLContext:
    """Poll with this site's client certificate; require a peer chain to the CA."""
    return client_ssl_context(
        str(tls.ca), str(tls.client_cert or tls.cert), str(tls.client_key or tls.key)
    )
