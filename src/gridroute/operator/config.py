"""`operator.yaml`: the one source of truth for every operator default.

Keys are camelCase in YAML (`maxRunning`, `metricsConfig`, `staleMetricsSeconds`,
as the Kubernetes resources they mirror spell them); snake_case is accepted too.
Every field carries its unit in its name. `load_config` names the file, the field
path and the value in every error.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic.alias_generators import to_camel

from gridroute import tls
from gridroute.config import ConfigError, ListenAddress, check_files, load, split_listen, validate
from gridroute.inbound.settings import ListenerSettings
from gridroute.relay.nats_link import SignalsTransport, Transport
from gridroute.wire.prometheus import MetricsFormat
from gridroute.wire.signals import NAME_PATTERN

SCRAPE_INTERVAL_ENV = "GRID_SIGNALS_SCRAPE_INTERVAL_SECS"
"""Overrides `scrapeIntervalSeconds` (the seed's operator setting)."""

Name = Annotated[str, Field(pattern=f"^{NAME_PATTERN}$")]

POOL_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
"""An InferencePool is a Kubernetes object: its name is a DNS-1123 subdomain."""


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


class TLSFiles(_Model):
    """This site's certificate, key and the CA every site's certificates chain to."""

    cert: Path
    """PEM server certificate presented on the listener (URI SAN names this site)."""
    key: Path
    """PEM private key of `cert`."""
    ca: Path
    """PEM CA bundle that peers' and clients' certificates must chain to."""
    client_cert: Path | None = None
    """PEM client certificate presented when polling peers; defaults to `cert`."""
    client_key: Path | None = None
    """PEM private key of `clientCert`; defaults to `key`."""


class MetricsTLS(_Model):
    """TLS towards a metrics endpoint (the EPP or model server), when it is https."""

    ca: Path | None = None
    """CA bundle to verify the endpoint; the system store when unset."""
    cert: Path | None = None
    """Client certificate, when the endpoint wants one."""
    key: Path | None = None
    """Private key of `cert`."""
    insecure_skip_verify: bool = False
    """Do not verify the endpoint's certificate (lab use only)."""


class MetricsConfig(_Model):
    """Where and how to scrape a provider's load."""

    endpoint: str = Field(pattern=r"^https?://")
    """Full URL of the Prometheus page, e.g. http://epp.ns.svc:9090/metrics. Point it at
    the EPP Service, not a pod: a standby replica reports nothing."""
    format: MetricsFormat = MetricsFormat.AUTO
    """vllm, sglang, epp, or auto (chosen by the series present)."""
    stale_metrics_seconds: float = Field(10.0, ge=0)
    """How long a failing scrape keeps publishing the last readiness before the provider
    goes silent."""
    bearer_token_file: Path | None = None
    """File holding a bearer token, re-read on every scrape (so rotation just works)."""
    tls: MetricsTLS | None = None
    """TLS settings for an https endpoint."""
    pool_name: str | None = Field(None, min_length=1, max_length=253, pattern=POOL_NAME_PATTERN)
    """The InferencePool to read, for an llm-d EPP that serves several: only series whose
    pool label names it count (`name` on the pool gauges, `inference_pool` on the flow-
    control queue), and a series without that label is left out, being the total across
    pools. A page without this pool's running or queue series is a failed scrape
    (`empty`). Unset: every series on the page counts (one pool). EPP pages only: needs
    `format` epp or auto (auto then reads the page as EPP)."""

    @field_validator("pool_name")
    @classmethod
    def _pool_needs_epp(cls, value: str | None, info: ValidationInfo) -> str | None:
        fmt = info.data.get("format")
        if value is not None and fmt in (MetricsFormat.VLLM, MetricsFormat.SGLANG):
            raise ValueError(
                f"names an EPP pool, but format is {fmt.value}, whose series name no pool "
                "(use format epp or auto, or leave poolName unset)"
            )
        return value


class ProviderConfig(_Model):
    """One model pool at this site."""

    name: Name
    """Provider (cluster) name; with the site it keys every row: `site/name`."""
    models: list[str] = Field(min_length=1)
    """Model names this provider serves."""
    backend_url: str = Field(pattern=r"^https?://")
    """Where the gateway sends this provider's requests."""
    max_running: float | None = Field(None, gt=0)
    """Configured concurrent requests per endpoint; capacity = maxRunning x ready."""
    metrics_config: MetricsConfig | None = None
    """How to measure load; without it the provider publishes no load (unmeasured)."""
    generation: int | None = Field(None, ge=0, lt=2**53)
    """Config generation that scopes ceiling learning; derived from this provider's
    settings when unset, so an edit starts learning over."""

    def config_generation(self) -> int:
        """The explicit generation, or a stable 48-bit digest of the settings."""
        if self.generation is not None:
            return self.generation
        # An unset poolName stays out of the digest, so adding the field left every
        # existing provider's generation (and what it has learned) as it was.
        unset_pool = self.metrics_config is not None and self.metrics_config.pool_name is None
        exclude: dict[str, Any] = {"generation": True}
        if unset_pool:
            exclude["metrics_config"] = {"pool_name": True}
        settings = self.model_dump(mode="json", exclude=exclude)
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).digest()
        return int.from_bytes(digest[:6], "big")


class PeerConfig(_Model):
    """Another site's operator."""

    site: Name
    """The site name its certificate must carry (`spiffe://<trustDomain>/site/<site>`)."""
    url: str = Field(pattern=r"^https?://")
    """Base URL of its operator; `/signals` is appended."""


class OperatorConfig(_Model):
    """A site operator: what it scrapes, whom it polls, where it listens."""

    site: Name
    """This site's name; every own row is labelled with it."""
    listen: ListenAddress = "0.0.0.0:9443"
    """host:port of the /signals, /metrics, /status and /healthz listener (IPv6 in
    brackets, `[::]:9443`; port 0: any free port)."""
    trust_domain: str = Field("gridroute.local", pattern=r"^[a-z0-9.-]+$")
    """SPIFFE trust domain of the site certificates."""
    tls: TLSFiles | None = None
    """Mutual TLS for serving and polling. Without it the listener is plain HTTP and peer
    identity is not checked (demos on one machine only)."""
    allowed_identities: list[str] | None = None
    """SPIFFE IDs whose client certificates may read this operator (peers' sites, this
    site's gateways), e.g. `spiffe://gridroute.local/site/east`. Default: none (any
    certificate of `trustDomain` chained to the CA). Needs `tls`."""
    listener: ListenerSettings = ListenerSettings()
    """Header, body and idle timeouts and the connection limit of the listener. Default:
    nginx's timeouts (60 s, 60 s, 75 s), 4096 connections."""
    peers: list[PeerConfig] = []
    """Peer operators to poll (the mesh transport)."""
    signals: SignalsTransport = SignalsTransport()
    """`transport: nats` publishes this site's own newest rows on `<prefix>.<site>` after
    every scrape, for gateways that subscribe (docs/signals.md, "NATS"). Default: mesh."""
    providers: list[ProviderConfig] = []
    """This site's providers."""
    scrape_interval_seconds: float = Field(1.0, gt=0)
    """How often providers are scraped; env GRID_SIGNALS_SCRAPE_INTERVAL_SECS overrides."""
    scrape_timeout_seconds: float | None = Field(None, gt=0)
    """Per-scrape timeout; default 80 % of the interval; must be shorter than it."""
    peer_poll_interval_seconds: float = Field(1.0, gt=0)
    """How often each peer is polled (one round polls all peers at once)."""
    peer_poll_timeout_seconds: float | None = Field(None, gt=0)
    """Per-poll timeout; default 80 % of the interval; must be shorter than it."""
    relay_window_seconds: float = Field(60.0, gt=0)
    """Samples served per provider reach back at most this far."""
    relay_samples_per_provider: int = Field(8, ge=1, le=64)
    """At most this many samples per provider are served (8 fields x 8 samples x 64
    providers is the 4096-line peer cap)."""
    retain_latest_seconds: float = Field(3600.0, gt=0)
    """A peer provider's newest sample is kept (and served) this long through a partition,
    so its last readiness stands; older history leaves with the relay window."""

    @model_validator(mode="after")
    def _consistent(self) -> OperatorConfig:
        if self.scrape_timeout_s >= self.scrape_interval_seconds:
            raise ValueError("scrapeTimeoutSeconds must be shorter than scrapeIntervalSeconds")
        if self.peer_timeout_s >= self.peer_poll_interval_seconds:
            raise ValueError("peerPollTimeoutSeconds must be shorter than peerPollIntervalSeconds")
        names = [p.name for p in self.providers]
        if len(set(names)) != len(names):
            raise ValueError(f"providers: duplicate name in {names}")
        sites = [p.site for p in self.peers]
        if len(set(sites)) != len(sites) or self.site in sites:
            raise ValueError(f"peers: each site once and not this site ({self.site}), got {sites}")
        if self.signals.transport is Transport.PROMETHEUS:
            raise ValueError(
                "signals.transport: prometheus is for gateways; an operator uses mesh or nats"
            )
        return self

    @property
    def scrape_timeout_s(self) -> float:
        return self.scrape_timeout_seconds or 0.8 * self.scrape_interval_seconds

    @property
    def peer_timeout_s(self) -> float:
        return self.peer_poll_timeout_seconds or 0.8 * self.peer_poll_interval_seconds

    @property
    def host(self) -> str:
        return split_listen(self.listen)[0]

    @property
    def port(self) -> int:
        return split_listen(self.listen)[1]


def parse_config(data: Any, source: str = "operator.yaml") -> OperatorConfig:
    """Validate a loaded mapping, applying the scrape-interval environment override."""
    if isinstance(data, dict):
        data = _env_override(data)
    return validate(OperatorConfig, data, source)


def _env_override(data: dict[str, Any]) -> dict[str, Any]:
    env = os.environ.get(SCRAPE_INTERVAL_ENV)
    if env is None:
        return data
    try:
        value = float(env)
    except ValueError:
        raise ConfigError.one(
            SCRAPE_INTERVAL_ENV, "(environment)", f"not a number: {env!r}"
        ) from None
    data = {**data, "scrapeIntervalSeconds": value}
    data.pop("scrape_interval_seconds", None)
    return data


def load_config(path: Path, *, files: bool = True) -> OperatorConfig:
    """Read and validate `path`; with `files`, check that every file it names exists,
    is readable and loads into a TLS context, as a start-up must."""
    cfg = load(path, OperatorConfig, _env_override)
    if files:
        check_files(str(path), named_files(cfg))
        tls.check(str(path), tls_blocks(cfg))
    return cfg


def server_files(t: TLSFiles) -> tls.TLSFiles:
    """The listener's files, each named by its field."""
    return tls.TLSFiles(
        tls.Pem("tls.ca", t.ca), tls.Pem("tls.cert", t.cert), tls.Pem("tls.key", t.key)
    )


def client_files(t: TLSFiles) -> tls.TLSFiles:
    """The peer poller's files: `clientCert`/`clientKey`, else the server's own."""
    cert = (
        tls.Pem("tls.clientCert", t.client_cert) if t.client_cert else tls.Pem("tls.cert", t.cert)
    )
    key = tls.Pem("tls.clientKey", t.client_key) if t.client_key else tls.Pem("tls.key", t.key)
    return tls.TLSFiles(tls.Pem("tls.ca", t.ca), cert, key)


def metrics_files(t: MetricsTLS, where: str) -> tls.TLSFiles:
    """A metrics endpoint's files, named under `where` (the block's field path)."""

    def pem(name: str, path: Path | None) -> tls.Pem | None:
        return None if path is None else tls.Pem(f"{where}.{name}", path)

    return tls.TLSFiles(pem("ca", t.ca), pem("cert", t.cert), pem("key", t.key))


def tls_blocks(cfg: OperatorConfig) -> list[tls.TLSFiles]:
    """Every TLS context the operator will build, with its files named by field."""
    blocks = []
    if cfg.tls is not None:
        blocks.append(server_files(cfg.tls))
        if cfg.tls.client_cert or cfg.tls.client_key:
            blocks.append(client_files(cfg.tls))
    for i, prov in enumerate(cfg.providers):
        mc = prov.metrics_config
        if mc is not None and mc.tls is not None:
            blocks.append(metrics_files(mc.tls, f"providers.{i}.metricsConfig.tls"))
    if cfg.signals.nats is not None and cfg.signals.nats.tls is not None:
        blocks.append(cfg.signals.nats.tls.tls_files("signals.nats.tls"))
    return blocks


def named_files(cfg: OperatorConfig) -> dict[str, Path | None]:
    """Every file the config points at, by field path (camelCase, as written)."""
    files: dict[str, Path | None] = {}
    if cfg.tls is not None:
        t = cfg.tls
        files |= {"tls.cert": t.cert, "tls.key": t.key, "tls.ca": t.ca}
        files |= {"tls.clientCert": t.client_cert, "tls.clientKey": t.client_key}
    for i, prov in enumerate(cfg.providers):
        mc = prov.metrics_config
        if mc is not None and mc.tls is not None:
            where = f"providers.{i}.metricsConfig.tls"
            files |= {f"{where}.ca": mc.tls.ca, f"{where}.cert": mc.tls.cert}
            files |= {f"{where}.key": mc.tls.key}
        if mc is not None and mc.bearer_token_file is not None:
            files[f"providers.{i}.metricsConfig.bearerTokenFile"] = mc.bearer_token_file
    if cfg.signals.nats is not None:
        files |= cfg.signals.nats.files("signals.nats")
    return files
