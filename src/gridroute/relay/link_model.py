"""The base of every `signals:` link model: camelCase and snake_case both accepted.

The operator's file is camelCase and the gateway's snake_case (docs/config.md), and a
link block (`signals.nats`, `signals.prometheus`) can appear in either, so each link
model accepts both spellings; `LinkTLS` is the one TLS block they share.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from gridroute.tls import Pem, TLSFiles


class LinkModel(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=True,
    )


class LinkTLS(LinkModel):
    """TLS toward a server (NATS, a query API); with a client certificate, mutual TLS."""

    ca_file: Path | None = None
    """CA bundle that signs the server's certificate (default: system store)."""
    cert_file: Path | None = None
    """Client certificate (a NATS server may map it to a user: `verify_and_map`)."""
    key_file: Path | None = None
    """Private key of `cert_file`."""

    def tls_files(self, where: str) -> TLSFiles:
        """The files, each named by its field under `where` (the block's path)."""

        def pem(name: str, path: Path | None) -> Pem | None:
            return None if path is None else Pem(f"{where}.{name}", path)

        return TLSFiles(
            pem("caFile", self.ca_file),
            pem("certFile", self.cert_file),
            pem("keyFile", self.key_file),
        )
