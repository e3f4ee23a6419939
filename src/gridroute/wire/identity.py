"""SPIFFE identities of sites: the URI SAN every site certificate carries.

Pure string work, shared by the certificate maker (`operator/certs.py`), the TLS
checks of both processes and the relay client, so one spelling of an identity exists.
"""

from __future__ import annotations

SCHEME = "spiffe://"


def spiffe_id(trust_domain: str, site: str) -> str:
    """The URI SAN a site's certificates carry: `spiffe://<domain>/site/<site>`."""
    return f"{SCHEME}{trust_domain}/site/{site}"
