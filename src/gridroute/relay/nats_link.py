"""How a process reaches NATS, the signals transport for fleets past the mesh.

One model serves the operator (camelCase file) and the gateway (snake_case file): the
camelCase aliases and the snake_case names are both accepted. Identity is the NATS
server's to enforce: each site's credentials (a user, or a client certificate mapped
to a user with `verify_and_map`) may publish only on `<subject_prefix>.<site>`, so the
engine itself refuses one site speaking for another; readers check again that every
row names the site of its subject (docs/signals.md, "NATS").
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from gridroute.relay.link_model import LinkModel as _Model
from gridroute.relay.link_model import LinkTLS
from gridroute.relay.prometheus_link import PrometheusLink
from gridroute.tls import load_context

DEFAULT_PREFIX = "gridroute.signals"
DEFAULT_GATEWAY_PREFIX = "gridroute.gateways"


class Transport(StrEnum):
    """Where site readings travel: the embedded mTLS mesh (default) or NATS."""

    MESH = "mesh"
    NATS = "nats"
    PROMETHEUS = "prometheus"
    """Gateways only: read the rows from a Prometheus-compatible query API."""


NatsTLS = LinkTLS
"""TLS toward the NATS servers."""


class NatsLink(_Model):
    """Servers, subject prefix and credentials of one NATS connection."""

    servers: list[str] = Field(min_length=1)
    """Server URLs (`nats://host:4222`, `tls://host:4222`); the client fails over
    between them and reconnects without end."""
    subject_prefix: str = Field(DEFAULT_PREFIX, pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$")
    """Each site publishes on `<prefix>.<site>`; readers subscribe to `<prefix>.*`."""
    gateway_subject_prefix: str = Field(
        DEFAULT_GATEWAY_PREFIX, pattern=r"^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$"
    )
    """Gateways publish their own in-flight on `<prefix>.<site>.<gateway id>` and read
    every gateway's from `<prefix>.>`, for the fair share among gateways."""
    report_window_s: float = Field(5.0, gt=0)
    """A gateway's report counts in the others' sums for this long after it arrived
    (the mesh operator's window for its gateways' reports), so one that stops
    reporting ages out."""
    user: str | None = None
    """User name, when the server authenticates by user and password."""
    password_file: Path | None = None
    """File holding the password of `user` (never the password itself in the config)."""
    tls: NatsTLS | None = None
    """TLS toward the servers. Default: none (plain, for a trusted network or a demo)."""
    connect_timeout_s: float = Field(2.0, gt=0)
    """Per connection attempt."""
    reconnect_wait_s: float = Field(0.5, gt=0)
    """Pause between reconnect attempts to the next server."""
    flush_timeout_s: float = Field(0.8, gt=0)
    """A reader's round trip to its server (PING/PONG) must finish within this, or its
    read counts as failed, which pauses the silence judgement like a failed poll."""

    def subject(self, site: str) -> str:
        return f"{self.subject_prefix}.{site}"

    def files(self, where: str) -> dict[str, Path | None]:
        """Every file this link names, by field path (for the config checks)."""
        files: dict[str, Path | None] = {f"{where}.passwordFile": self.password_file}
        if self.tls is not None:
            files[f"{where}.tls.caFile"] = self.tls.ca_file
            files[f"{where}.tls.certFile"] = self.tls.cert_file
            files[f"{where}.tls.keyFile"] = self.tls.key_file
        return files


class SignalsTransport(_Model):
    """`signals:` of either process: which transport carries the site readings."""

    transport: Transport = Transport.MESH
    """`mesh` (operators poll each other over mutual TLS, the embedded default) or
    `nats` (each operator publishes its own rows, gateways subscribe)."""
    nats: NatsLink | None = None
    """Required with `transport: nats`."""
    prometheus: PrometheusLink | None = None
    """Required with `transport: prometheus` (gateways only)."""

    @model_validator(mode="after")
    def _nats_named(self) -> SignalsTransport:
        if self.transport is Transport.NATS and self.nats is None:
            raise ValueError("nats: required with transport: nats")
        if self.transport is Transport.PROMETHEUS and self.prometheus is None:
            raise ValueError("prometheus: required with transport: prometheus")
        return self


def connect_options(link: NatsLink, name: str) -> dict[str, Any]:
    """Keyword arguments for `nats.connect`: fail over, reconnect forever, no echo."""
    opts: dict[str, Any] = {
        "servers": list(link.servers),
        "name": name,
        "connect_timeout": link.connect_timeout_s,
        "reconnect_time_wait": link.reconnect_wait_s,
        "max_reconnect_attempts": -1,
        "allow_reconnect": True,
        "ping_interval": 5,
        "max_outstanding_pings": 2,
    }
    if link.user is not None:
        opts["user"] = link.user
    if link.password_file is not None:
        opts["password"] = link.password_file.read_text(encoding="utf-8").strip()
    if link.tls is not None:
        opts["tls"] = load_context(link.tls.tls_files("signals.nats.tls"), "config")
    return opts
