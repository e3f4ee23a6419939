"""How a gateway reaches a Prometheus-compatible query API (`signals.transport: prometheus`).

Gateways only: fleets that already collect every operator's `/signals` in Prometheus
(or Thanos Query, Mimir) let their gateways read the rows there (`relay/prometheus_source.py`);
operators keep polling each other (mesh) or publishing (NATS). camelCase and snake_case
keys are both accepted, like the other `signals:` models.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from gridroute.relay.link_model import LinkModel as _Model
from gridroute.relay.link_model import LinkTLS

MIB = 1024 * 1024


PrometheusTLS = LinkTLS
"""TLS toward the query API."""


class PrometheusLink(_Model):
    """Where and how a gateway reads site rows from a Prometheus-compatible API."""

    url: str
    """Base URL of the query API, e.g. `http://prometheus:9090` (`/api/v1/query` is
    appended; for Mimir include its prefix, e.g. `http://mimir/prometheus`). Required."""
    selector: str = 'job="gridroute-signals"'
    """Label matchers ANDed into every query, picking the scrape of the operators'
    `/signals`. Default: `job="gridroute-signals"` (deploy/prometheus/prometheus.yml)."""
    gateway_selector: str | None = 'job="gridroute-gateway"'
    """Label matchers picking the scrape of the gateways' own metrics, from which each
    read also takes every gateway's own in-flight per candidate
    (`grid_route_site_in_flight`) for the fair share among gateways. `null`: read none
    (the share falls back to this gateway's part of all polled load). Default:
    `job="gridroute-gateway"` (deploy/prometheus/prometheus.yml)."""
    tls: PrometheusTLS | None = None
    """TLS toward the API. Default: none (plain HTTP, or system CAs for https)."""
    poll_interval_s: float = Field(1.0, gt=0)
    """Seconds between reads. Default: 1.0."""
    timeout_s: float = Field(2.0, gt=0)
    """Seconds one read (both queries) may take before it counts as `unreachable`.
    Default: 2.0."""
    lookback_s: float = Field(30.0, gt=0)
    """How old a sample may be to be read at all; older ones leave the site with no
    new reading, and the freshness rules judge it silent. Default: 30."""
    max_series: int = Field(4096, gt=0)
    """Most series one answer may hold; more counts as `too_large`. Default: 4096."""
    max_response_bytes: int = Field(MIB, gt=0)
    """Read ceiling of one answer; a larger one counts as `too_large`. Default: 1 MiB."""

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    @field_validator("selector", "gateway_selector")
    @classmethod
    def _selector(cls, value: str | None) -> str | None:
        if value is not None and any(c in value for c in "{}[]"):
            raise ValueError('label matchers only, without braces, e.g. job="x"')
        return value

    def files(self, where: str) -> dict[str, Path | None]:
        """Every file this link names, by field path (for the config checks)."""
        if self.tls is None:
            return {}
        return {
            f"{where}.tls.caFile": self.tls.ca_file,
            f"{where}.tls.certFile": self.tls.cert_file,
            f"{where}.tls.keyFile": self.tls.key_file,
        }
