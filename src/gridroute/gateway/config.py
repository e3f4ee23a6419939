"""The gateway's configuration: one pydantic model, the single source of every default.

A YAML file is validated into `GatewayConfig` once at start and again on SIGHUP; the
request path never touches pydantic (it reads the plain `Routing` tables built from
it in `gateway.routing`). Every field carries a docstring that names its default, and
`gridroute config schema` prints the JSON Schema generated from these models.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gridroute import tls
from gridroute.config import (
    MAX_PORT,
    ListenAddress,
    check_files,
    load,
    parse_yaml,
    split_listen,
    validate,
)
from gridroute.core.overlay_request import DEFAULT_MAX_ATTEMPTS
from gridroute.core.prefix import PrefixAffinitySettings
from gridroute.core.select import Policy
from gridroute.core.settings import AvailabilitySettings
from gridroute.gateway import fairness_key
from gridroute.inbound.settings import ListenerSettings
from gridroute.relay.nats_link import SignalsTransport

MIB = 1024 * 1024


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", use_attribute_docstrings=True)


class TLSConfig(_Frozen):
    """TLS toward a backend or the operator; with `cert_file` and `key_file`, mutual TLS."""

    ca_file: str | None = None
    """CA bundle that signs the server's certificate. Default: none (system trust store)."""
    cert_file: str | None = None
    """Client certificate presented for mutual TLS. Default: none (no client certificate)."""
    key_file: str | None = None
    """Private key of `cert_file`. Default: none."""
    server_name: str | None = None
    """Name checked against the server's certificate. Default: none (the URL's host)."""
    verify: bool = True
    """Check the server's certificate. Default: true; false is for tests only."""

    @model_validator(mode="after")
    def _pair(self) -> TLSConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("tls.cert_file and tls.key_file must be set together")
        return self


class OperatorLink(_Frozen):
    """Where the gateway polls its site's operator for every site's load."""

    url: str
    """Base URL of the local operator (its `/signals` is polled). Required."""
    tls: TLSConfig | None = None
    """TLS toward the operator (mutual TLS with `cert_file`/`key_file`). Default: none
    (plain HTTP on a trusted network)."""
    identity: str | None = None
    """SPIFFE URI the operator's certificate must carry, e.g.
    `spiffe://gridroute.local/site/west`; when set, host names are not checked (the
    SPIFFE way). Default: none (with TLS, the host name is checked)."""
    poll_interval_s: float = Field(1.0, gt=0)
    """Seconds between polls of `/signals`. Default: 1.0."""
    timeout_s: float = Field(2.0, gt=0)
    """Seconds one poll may take before it counts as `unreachable`. Default: 2.0."""
    max_response_bytes: int = Field(MIB, gt=0)
    """Read ceiling of one poll; a larger answer counts as `too_large`. Default: 1 MiB."""


class SiteConfig(_Frozen):
    """One provider at one site: a backend the gateway can send requests to."""

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    """Site name, as the operators publish it. Required."""
    provider: str | None = Field(None, min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    """Provider (cluster, pool) at that site, as the operators publish it; answered in
    `x-grid-backend`. Default: the site name."""
    backend_url: str
    """Base URL of the site's OpenAI-compatible endpoint, e.g. `http://10.0.0.5:8000`.
    The request path (`/v1/...`) is appended. Required."""
    tls: TLSConfig | None = None
    """TLS toward this backend (mutual TLS with a client certificate). Default: none."""
    connect_timeout_s: float | None = Field(None, gt=0)
    """Connect timeout for this backend. Default: `timeouts.local_connect_timeout_s` for
    the local site, `timeouts.connect_timeout_s` for the others."""
    max_capacity: float | None = Field(None, gt=0)
    """Most capacity (`maxRunning x ready`) this candidate's samples may claim; a larger
    claim is clamped to it and counted (`grid_route_capacity_clamped_total`). Default:
    none (the claim stands unless `limits.claimed_capacity_factor` bounds it)."""
    health_path: str = "/v1/models"
    """Path probed with GET to judge the backend's health. Default: `/v1/models`
    (answered by vLLM, SGLang and most OpenAI-compatible servers)."""

    @field_validator("backend_url")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return value.rstrip("/")

    @property
    def provider_name(self) -> str:
        return self.provider or self.name

    @property
    def key(self) -> str:
        return f"{self.name}/{self.provider_name}"


class ModelConfig(_Frozen):
    """A model the gateway routes, the sites that serve it and the pick policy."""

    name: str = Field(min_length=1)
    """Model name as clients send it in the body's `model`. Required."""
    sites: list[str] | Literal["all"] = "all"
    """Site names that serve this model, or `all`. Default: `all`."""
    policy: Policy = Policy.GRIDROUTE
    """`gridroute` (local accounting, fair share, admission queue), `saturation` (the seed
    PR's pick on reported rho) or `first` (the front healthy site). Default: `gridroute`."""


class TimeoutsConfig(_Frozen):
    """Timeouts toward backends (seconds)."""

    connect_timeout_s: float = Field(2.0, gt=0)
    """Connect timeout toward a remote site; a timeout is retried once elsewhere.
    Default: 2.0."""
    local_connect_timeout_s: float = Field(0.5, gt=0)
    """Connect timeout toward the local site. Default: 0.5."""
    read_timeout_s: float | None = Field(600.0, gt=0)
    """Longest silence on a backend connection once the request was sent: the wait for
    the answer's headers (a long non-streamed generation) and each gap between chunks.
    Not retried (the backend may be working on it); answered 504 when nothing was sent
    yet. None: no limit. Default: 600."""


class LimitsConfig(_Frozen):
    """Bounds on what a client may send."""

    max_body_bytes: int = Field(10 * MIB, gt=0)
    """Largest request body read; a larger one is answered 413. Default: 10 MiB."""
    max_connections_per_site: int = Field(1024, ge=0)
    """Most open connections to one backend (0: unbounded). Default: 1024."""
    claimed_capacity_factor: float | None = Field(None, ge=1)
    """Clamp every sample's claimed capacity to this factor times the candidate's learned
    soft ceiling (at least `availability.ceiling_floor`), counted as with
    `sites[].max_capacity`. It bounds how fast a claim can grow, not where it ends, and
    holds back an honest site that never yet carried load, hence off by default.
    Default: none."""


class AuthConfig(_Frozen):
    """Who may call the API."""

    api_keys_file: str | None = None
    """File of accepted API keys, one per line (`#` comments and blank lines skipped,
    each key one word of 16 characters or more), re-read on SIGHUP. When set, every
    `/v1/*`, `/grid/status` and `/dashboard` request on the API listener needs
    `Authorization: Bearer <key>`, else 401 `invalid_api_key`; `/healthz` and
    `/readyz` stay open. Keys are never logged. Default: none (no keys needed)."""


class MetricsListener(_Frozen):
    """The opt-in Prometheus listener."""

    listen: ListenAddress | None = None
    """`host:port` serving `/metrics`, `/grid/status` and `/dashboard` (an operator's
    listener, bindable to another address than the API's, and never behind
    `auth.api_keys_file`; port 0: any free port); with `workers` N, worker i listens on
    port + i. Default: none (no listener)."""


class TracingConfig(_Frozen):
    """Optional OpenTelemetry tracing (install the `tracing` extra)."""

    otlp_endpoint: str | None = None
    """OTLP/HTTP traces endpoint, e.g. `http://127.0.0.1:4318/v1/traces`. Default: none
    (no spans are made)."""
    service_name: str = "gridroute-gateway"
    """`service.name` resource attribute. Default: `gridroute-gateway`."""
    sample_ratio: float = Field(1.0, ge=0.0, le=1.0)
    """Fraction of requests traced (head sampling, drawn per request as it starts: a
    request is traced whole or not at all, and one not drawn costs no span). Exporting
    every request's spans takes the gateway's CPU per request to 2-2.6x
    (bench/bench_observability.py), so a busy gateway samples, e.g. 0.01.
    Default: 1 (every request)."""


class AffinityConfig(_Frozen):
    """Session affinity: requests of one session go back to the site that served it last
    while that site is in the tier the pressure rules choose (its prefix cache keeps
    paying off); they move when it is full, silent or down."""

    header: str | None = "x-session-id"
    """Request header whose value names the session. Default: `x-session-id`; null turns
    affinity off. The value is never used as a metric label."""
    ttl_s: float = Field(600.0, gt=0)
    """A session idle this long is forgotten. Default: 600."""
    max_entries: int = Field(100_000, ge=1)
    """Sessions remembered per worker (least recently used forgotten first). Default:
    100000."""
    user_field: bool = True
    """Under a routing overlay, a request without the header is keyed by the body's
    OpenAI `user` field when it has one. Default: true."""


class OverlayConfig(_Frozen):
    """Where the gateway reads its routing overlay (docs/overlay.md): a file it watches
    or a URL it polls. Models the overlay names are routed by its groups and pickers;
    the others keep `models:` routing."""

    file: str | None = None
    """Overlay file, re-read when its content changes. Default: none."""
    url: str | None = None
    """Overlay URL (e.g. `gridroute control`'s `/overlay`), polled. Default: none."""
    poll_interval_s: float = Field(1.0, gt=0)
    """Seconds between reads of the file or the URL. Default: 1.0."""
    timeout_s: float = Field(2.0, gt=0)
    """Seconds one URL read may take. Default: 2.0."""
    max_attempts: int = Field(DEFAULT_MAX_ATTEMPTS, ge=1, le=10)
    """Attempts per request, the first included: retries stay in the selected group
    while it has an untried viable member, then fall through to the next group.
    Default: 3."""

    @model_validator(mode="after")
    def _one_source(self) -> OverlayConfig:
        if (self.file is None) == (self.url is None):
            raise ValueError("overlay: set exactly one of file and url")
        if self.url is not None and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"overlay.url: must start with http:// or https:// (got {self.url!r})")
        return self


class HealthConfig(_Frozen):
    """Active health probes of each backend."""

    enabled: bool = True
    """Probe backends; when false no backend is ever demoted and readiness does not wait
    for a probe round. Default: true."""
    interval_s: float = Field(3.0, gt=0)
    """Seconds between probes of one backend. Default: 3.0."""
    timeout_s: float = Field(2.0, gt=0)
    """Seconds one probe may take. Default: 2.0."""
    rise: int = Field(2, ge=1)
    """Consecutive passes before a backend counts as up. Default: 2."""
    fall: int = Field(3, ge=1)
    """Consecutive failures before a backend counts as down (demoted). Default: 3.
    Until `rise` passes or `fall` failures, a backend is `unknown` and not demoted.
    An answer below 500 passes (a 401 still shows a live server)."""


class GatewayConfig(_Frozen):
    """`gridroute gateway --config FILE`: what one gateway routes and how."""

    listen: ListenAddress = "127.0.0.1:8080"
    """`host:port` of the OpenAI-compatible API (IPv6 in brackets, `[::1]:8080`; port 0:
    any free port, shared by every worker). Default: `127.0.0.1:8080`."""
    workers: int = Field(1, ge=1)
    """Worker processes sharing `listen` (SO_REUSEPORT); each counts as one gateway for
    the fair-share rule. Default: 1."""
    local_site: str | None = None
    """Name of the site this gateway runs in: its candidates go first (the front) and use
    the local connect timeout. Default: none (every site is remote)."""
    operator: OperatorLink | None = None
    """The local operator. Default: none (no load signals: sites are picked by health
    and configured order only)."""
    signals: SignalsTransport = SignalsTransport()
    """Where site readings come from: `transport: mesh` (poll `operator`, the default),
    `transport: nats` (subscribe to every site's subject; `operator` is not polled) or
    `transport: prometheus` (read them from a Prometheus-compatible query API,
    `signals.prometheus`; `operator` is not polled). Default: mesh."""
    sites: list[SiteConfig] = Field(min_length=1)
    """Backends, in preference order after the local site. Required."""
    models: list[ModelConfig] = Field(min_length=1)
    """Models routed; any other model is answered 404 `model_not_found`. Required."""
    availability: AvailabilitySettings = AvailabilitySettings()
    """Selection and shedding settings (`gridroute.core.settings`). Default: all defaults
    (shedding off)."""
    timeouts: TimeoutsConfig = TimeoutsConfig()
    """Backend timeouts. Default: all defaults."""
    limits: LimitsConfig = LimitsConfig()
    """Request limits. Default: all defaults."""
    metrics: MetricsListener = MetricsListener()
    """Prometheus listener. Default: off."""
    tracing: TracingConfig = TracingConfig()
    """OpenTelemetry tracing. Default: off."""
    health: HealthConfig = HealthConfig()
    """Backend health probes. Default: on, every 3 s, up after 2, down after 3."""
    affinity: AffinityConfig = AffinityConfig()
    """Session affinity by a request header. Default: on, header `x-session-id`."""
    prefix_affinity: PrefixAffinitySettings = PrefixAffinitySettings()
    """Prefix affinity (docs/prefix-affinity.md): a request goes to the site that served
    its longest prefix, within the selected tier and under this gateway's budget.
    Default: on, threshold 0.8, exploration 0.02."""
    auth: AuthConfig = AuthConfig()
    """API keys. Default: none needed."""
    fairness_key: str = "api_key"
    """Who a request belongs to for fair admission past capacity (docs/selection.md,
    "Fair admission"): `api_key` (the bearer token), `user` (the body's OpenAI `user`
    field), `header:<name>` or `address`. A key absent, empty or over 256 characters
    falls back to the client address. Never a metric label. Default: `api_key`."""
    listener: ListenerSettings = ListenerSettings()
    """Header, body and idle timeouts and the connection limit of the API listener
    (`gridroute.inbound.settings`). Default: nginx's timeouts, 4096 connections."""
    shutdown_drain_s: float = Field(5.0, ge=0)
    """On SIGTERM, how long the listener stays open answering `/readyz` 503 and every
    new request 503 `shutting_down` with `Retry-After` and `Connection: close`, so load
    balancers and kept-alive clients move away without a reset. Default: 5."""
    overlay: OverlayConfig | None = None
    """Routing overlay (selection groups and pickers). Default: none (`models:` only)."""
    shutdown_grace_s: float = Field(30.0, ge=0)
    """After the drain period, how long in-flight requests and streams may still run
    before they are cut. Default: 30."""

    @field_validator("fairness_key")
    @classmethod
    def _fairness_source(cls, value: str) -> str:
        if not fairness_key.valid_source(value):
            raise ValueError(
                f"must be api_key, user, address or header:<name> (got {value[:80]!r})"
            )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> GatewayConfig:
        names = {s.name for s in self.sites}
        keys = [s.key for s in self.sites]
        dup = {k for k in keys if keys.count(k) > 1}
        if dup:
            raise ValueError(f"sites: duplicate site/provider {sorted(dup)}")
        if self.metrics.listen is not None:
            mport = split_listen(self.metrics.listen)[1]
            if mport and mport + self.workers - 1 > MAX_PORT:
                raise ValueError(
                    f"metrics.listen: worker i listens on port + i; with {self.workers} "
                    f"workers port {mport} runs past {MAX_PORT}"
                )
        if self.local_site is not None and self.local_site not in names:
            raise ValueError(f"local_site: {self.local_site!r} is not one of the sites")
        seen: set[str] = set()
        for i, m in enumerate(self.models):
            if m.name in seen:
                raise ValueError(f"models.{i}.name: duplicate model {m.name!r}")
            seen.add(m.name)
            if m.sites != "all":
                unknown = [s for s in m.sites if s not in names]
                if unknown:
                    raise ValueError(f"models.{i}.sites: unknown sites {unknown}")
        return self


def parse_config(text: str, source: str = "<config>") -> GatewayConfig:
    """Validate YAML text; errors name the source and the dotted field path."""
    return validate(GatewayConfig, parse_yaml(text, source), source)


def load_config(path: str | Path, *, files: bool = True) -> GatewayConfig:
    """Read and validate a config file; with `files`, check that every file it names
    (certificates, keys, CA bundles) exists, is readable and loads into a TLS context,
    as a start-up must."""
    cfg = load(path, GatewayConfig)
    if files:
        check_files(str(path), named_files(cfg))
        tls.check(str(path), tls_blocks(cfg))
    return cfg


def tls_blocks(cfg: GatewayConfig) -> list[tls.TLSFiles]:
    """The files of every TLS context the gateway will build, named by field."""
    blocks = []
    if cfg.operator is not None and cfg.operator.tls is not None:
        blocks.append(tls_files(cfg.operator.tls, "operator.tls"))
    for i, site in enumerate(cfg.sites):
        if site.tls is not None:
            blocks.append(tls_files(site.tls, f"sites.{i}.tls"))
    if cfg.signals.nats is not None and cfg.signals.nats.tls is not None:
        blocks.append(cfg.signals.nats.tls.tls_files("signals.nats.tls"))
    return blocks


def tls_files(t: TLSConfig, where: str = "tls") -> tls.TLSFiles:
    """The files of a TLS block, each named by its field (`where` is the block's path)."""

    def pem(name: str, path: str | None) -> tls.Pem | None:
        return None if path is None else tls.Pem(f"{where}.{name}", path)

    return tls.TLSFiles(
        pem("ca_file", t.ca_file), pem("cert_file", t.cert_file), pem("key_file", t.key_file)
    )


def named_files(cfg: GatewayConfig) -> dict[str, str | None]:
    """Every file the config points at, by dotted field path."""
    files: dict[str, str | None] = {}

    def tls(where: str, t: TLSConfig | None) -> None:
        if t is not None:
            files[f"{where}.ca_file"] = t.ca_file
            files[f"{where}.cert_file"] = t.cert_file
            files[f"{where}.key_file"] = t.key_file

    if cfg.operator is not None:
        tls("operator.tls", cfg.operator.tls)
    for i, site in enumerate(cfg.sites):
        tls(f"sites.{i}.tls", site.tls)
    if cfg.signals.nats is not None:
        files |= {
            k: None if v is None else str(v)
            for k, v in cfg.signals.nats.files("signals.nats").items()
        }
    if cfg.signals.prometheus is not None:
        files |= {
            k: None if v is None else str(v)
            for k, v in cfg.signals.prometheus.files("signals.prometheus").items()
        }
    files["auth.api_keys_file"] = cfg.auth.api_keys_file
    return files


def json_schema() -> dict[str, object]:
    """The JSON Schema of the gateway config file."""
    return GatewayConfig.model_json_schema()
