"""`control.yaml`: the services the TrafficMap control plane routes, their homes, the probe
and capacity-polling policies, and where maps and routes are published.

Without Kubernetes this file is the placement: each service's homes, their endpoints and
allocations. Ready replicas and capacity reports come live from each home's gridroute
operator (`operator:`), or are given here (`ready:`) for a static map.

Each service is validated on its own, so one bad edit (a factor <= 0, a probe spec out of
range, an unknown field) refuses only that service: its map keeps its last table and
Published goes False with reason InvalidOwner; every other service goes on. Errors name
the service, the cluster and the field: `control.yaml: services[llama-chat].routing.
capacityFactors[cluster-a]: must be positive (got '0')`.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import InitErrorDetails, PydanticCustomError

from gridroute import tls
from gridroute.config import ConfigError, Problem, check_files, read_mapping
from gridroute.core.quantity import QuantityError, parse_quantity
from gridroute.core.trafficmap import AllFailedPolicy, Mode
from gridroute.wire.trafficmap import DNS_LABEL_PATTERN

Name = Annotated[str, Field(pattern=DNS_LABEL_PATTERN, max_length=63)]
"""A Kubernetes DNS label: service, namespace and cluster names."""
Status = Annotated[int, Field(ge=100, le=599)]


def _positive_quantity(raw: str | int | float) -> str | int | float:
    try:
        factor = parse_quantity(raw)
    except QuantityError:
        raise ValueError("not a Kubernetes quantity") from None
    if factor <= 0:
        raise ValueError("must be positive")
    return raw


Factor = Annotated[str | int | float, AfterValidator(_positive_quantity)]
"""A capacity factor: a Kubernetes quantity above 0 ("1", "1.5", "500m")."""


def _report_format(_: str) -> Literal["report"]:
    """OME spells the report format `Report`, gridroute `report`: both are one value."""
    return "report"


ControlConfigError = ConfigError
"""control.yaml cannot be used at all (not YAML, or a bad top-level field): the one
`ConfigError` every config kind raises, one `file: field: reason` line per problem."""


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


class ProbeSpec(_Model):
    """A routing health probe: an HTTP request to each home's endpoint (reference 4.3)."""

    path: str = Field("/v1/models", pattern=r"^/")
    """Path probed on the endpoint; the one a client's request would reach."""
    method: Literal["GET", "HEAD", "POST"] = "GET"
    accept_statuses: list[Status] = Field(default_factory=lambda: [200], min_length=1)
    """Statuses that pass."""
    gate_statuses: list[Status] = Field(default_factory=lambda: [500, 502, 503, 504], min_length=1)
    """Statuses that fail (as do transport errors and timeouts); any other status is
    Unknown and never gates. Required, as in OME: an empty list would never gate."""
    period_seconds: float = Field(10.0, ge=0.05, le=3600)
    timeout_seconds: float = Field(2.0, gt=0, le=60)
    failure_threshold: int = Field(3, ge=1, le=100)
    success_threshold: int = Field(1, ge=1, le=100)
    all_failed_policy: AllFailedPolicy = AllFailedPolicy.PRESERVE_TRAFFIC
    """When every home's probe has failed: keep capacity weights, or zero the table."""
    disabled: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> ProbeSpec:
        if self.timeout_seconds >= self.period_seconds:
            raise ValueError("timeoutSeconds must be shorter than periodSeconds")
        both = set(self.accept_statuses) & set(self.gate_statuses)
        if both:
            raise ValueError(f"a status cannot both pass and gate: {sorted(both)}")
        return self


class ProbeOverride(_Model):
    """A service's inline probe: any field set here overrides the global probe."""

    path: str | None = Field(None, pattern=r"^/")
    method: Literal["GET", "HEAD", "POST"] | None = None
    accept_statuses: list[Status] | None = None
    gate_statuses: list[Status] | None = None
    period_seconds: float | None = None
    timeout_seconds: float | None = None
    failure_threshold: int | None = None
    success_threshold: int | None = None
    all_failed_policy: AllFailedPolicy | None = None
    disabled: bool | None = None


class _CapacityFields(_Model):
    """The fields of a capacity policy: `capacityPolling`'s, and a service's own
    `routing.capacity`."""

    path: str = Field("/capacity/{provider}", pattern=r"^/")
    """Path on the home's operator; `{provider}` is the home's provider name."""
    method: Literal["GET", "HEAD", "POST"] = "GET"
    """OME's methods. POST is sent with an empty body; a HEAD answer has no body, so it
    never carries a report (every HEAD poll falls back to the control-plane allocation).
    gridroute's own operator answers GET (and HEAD)."""
    format: Annotated[Literal["report", "Report"], AfterValidator(_report_format)] = "report"
    """The `{servable, observedAt}` report, the only format; OME's spelling `Report` is
    taken as the same value."""
    period_seconds: float = Field(10.0, ge=0.05, le=3600)
    timeout_seconds: float = Field(2.0, gt=0, le=60)
    """With polling enabled, shorter than the period (polls would pile up otherwise)."""
    samples: int = Field(3, ge=1, le=20)
    """Reports kept per home."""
    quorum: int = Field(1, ge=1, le=20)
    """Fresh reports among them needed before the lowest one lowers the allocation."""
    max_age_seconds: float = Field(30.0, gt=0)
    """With polling enabled, at least the period (else every report would go stale
    before the next poll and the allocation would flap)."""

    def _problems(self, *, spans: bool) -> list[tuple[str, str, float]]:
        """(field, reason, value) for each rule the policy breaks as a polled one. With
        `spans` (a service's own block, as OME's inline validation): `maxAgeSeconds` must
        span at least `quorum` whole periods, else a quorum could never be fresh at once."""
        t, p, m, q = self.timeout_seconds, self.period_seconds, self.max_age_seconds, self.quorum
        problems: list[tuple[str, str, float]] = []
        if t >= p:
            problems.append(("timeoutSeconds", f"must be shorter than periodSeconds ({p:g})", t))
        if m < p:
            problems.append(("maxAgeSeconds", f"must be at least periodSeconds ({p:g})", m))
        elif spans and q > 1 and Fraction(str(m)) // Fraction(str(p)) < q:
            reason = f"must span at least quorum ({q}) periods of periodSeconds ({p:g})"
            problems.append(("maxAgeSeconds", reason, m))
        return problems


class CapacityPolling(_CapacityFields):
    """Endpoint capacity reports `{servable, observedAt}` from each home's operator."""

    enabled: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> CapacityPolling:
        if self.quorum > self.samples:
            raise ValueError("quorum cannot exceed samples")
        if not self.enabled:
            return self  # as OME: only a configured source is checked against its period
        problems = self._problems(spans=False)
        if problems:
            field, reason, value = problems[0]
            raise ValueError(f"{field} ({value:g}) {reason}")
        return self


def _located(title: str, problems: list[tuple[str, str, object]]) -> ValidationError:
    """A validation error whose lines name the fields (`timeoutSeconds`), not the block."""
    return ValidationError.from_exception_data(
        title,
        [
            InitErrorDetails(
                type=PydanticCustomError("value_error", "{reason}", {"reason": reason}),
                loc=(field,),
                input=value,
            )
            for field, reason, value in problems
        ],
    )


class ServiceCapacity(_CapacityFields):
    """A service's own capacity policy (`routing.capacity`, OME's spec.routing.capacity).
    It replaces `capacityPolling` whole for that service: a field left out takes its
    default here, not the global value, and the block polls whether or not
    `capacityPolling.enabled` is set. `disabled: true` turns polling off for the service
    and stands alone. Validated as a polled `capacityPolling`, and `maxAgeSeconds` must
    span at least `quorum` periods."""

    disabled: bool = False

    @model_validator(mode="after")
    def _consistent(self) -> ServiceCapacity:
        if self.disabled:
            others = sorted(to_camel(f) for f in self.model_fields_set - {"disabled"})
            if others:
                reason = f"must not be combined with other capacity fields ({', '.join(others)})"
                raise _located("ServiceCapacity", [("disabled", reason, True)])
            return self
        problems: list[tuple[str, str, object]] = []
        if self.quorum > self.samples:
            problems.append(("quorum", f"cannot exceed samples ({self.samples})", self.quorum))
        problems += self._problems(spans=True)
        if problems:
            raise _located("ServiceCapacity", problems)
        return self

    def policy(self) -> CapacityPolling | None:
        """The polling policy this block stands for; None when it is `disabled`."""
        if self.disabled:
            return None
        fields = self.model_dump(exclude={"disabled"})
        return CapacityPolling.model_validate({**fields, "enabled": True})


class OperatorRef(_Model):
    """The gridroute operator of a home's site: ready replicas and capacity come from it."""

    url: str = Field(pattern=r"^https?://")
    provider: Name
    """The provider at that operator whose ready endpoints are this home's replicas."""


class Component(_Model):
    """The decoder of an engine+decoder service: its own counts (the lower one wins)."""

    allocated: int = Field(ge=0)
    ready: int | None = Field(None, ge=0)
    provider: Name | None = None
    """Provider at the home's operator for the decoder's ready count."""


class HomeConfig(_Model):
    cluster: Name
    endpoint: str | None = None
    """URL clients reach the service at in this cluster; without one, no entry."""
    allocated: int = Field(ge=0)
    """Replicas the control plane admitted there."""
    ready: int | None = Field(None, ge=0)
    """Static ready count; with `operator`, the live count replaces it."""
    operator: OperatorRef | None = None
    decoder: Component | None = None
    site: str | None = Field(None, min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    """The gateway's `sites[].name` that reaches this home, for the overlay publisher.
    Default: the cluster name."""
    provider: str | None = Field(None, min_length=1, pattern=r"^[A-Za-z0-9._-]+$")
    """The gateway's `sites[].provider` for this home. Default: the operator's provider,
    else the site."""

    @property
    def backend(self) -> tuple[str, str]:
        """(site, provider) of the gateway backend for this home."""
        site = self.site or self.cluster
        default = self.operator.provider if self.operator is not None else site
        return site, self.provider or default

    @model_validator(mode="after")
    def _counted(self) -> HomeConfig:
        if self.ready is None and self.operator is None:
            raise ValueError("give ready or an operator to read it from")
        return self


class Routing(_Model):
    enabled: bool = True
    """false opts this service out: its map and route are removed."""
    capacity_factors: dict[Name, Factor] = {}
    """Per-cluster Kubernetes quantity; each replica there counts this many times."""
    probe: ProbeOverride | None = None
    capacity: ServiceCapacity | None = None
    """This service's own capacity policy, in place of `capacityPolling` (or `disabled`)."""

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Without a block, dumped as before it existed: the service's source digest (and
        # so its map's sourceGeneration) does not move for services that do not use it.
        out: dict[str, Any] = handler(self)
        if self.capacity is None:
            out.pop("capacity", None)
        return out


class ServiceConfig(_Model):
    name: Name
    namespace: Name = "default"
    mode: Mode = Mode.SPLIT
    model: str | None = Field(None, min_length=1)
    """The model name clients send (the overlay's capability). Default: the name."""
    global_host: str | None = None
    """The service's global hostname (the `ome.io/global-host` annotation)."""
    routing: Routing = Routing()
    homes: list[HomeConfig] = []

    @model_validator(mode="after")
    def _homes(self) -> ServiceConfig:
        clusters = [h.cluster for h in self.homes]
        if len(set(clusters)) != len(clusters):
            raise ValueError(f"homes: each cluster once, got {clusters}")
        return self

    def factor(self, cluster: str) -> Fraction:
        raw = self.routing.capacity_factors.get(cluster)
        return Fraction(1) if raw is None else parse_quantity(raw)

    def probe(self, default: ProbeSpec) -> ProbeSpec:
        """The effective probe: the global one with this service's inline fields over it."""
        if self.routing.probe is None:
            return default
        inline = self.routing.probe.model_dump(exclude_none=True, by_alias=True)
        return ProbeSpec.model_validate({**default.model_dump(by_alias=True), **inline})

    def capacity(self, default: CapacityPolling) -> CapacityPolling | None:
        """The effective capacity policy: this service's `routing.capacity` whole, else
        the global one; None when polling is off for the service."""
        inline = self.routing.capacity
        if inline is None:
            return default if default.enabled else None
        return inline.policy()

    @property
    def capacity_disabled(self) -> bool:
        """Polling is off for this service by its own `routing.capacity.disabled`."""
        return self.routing.capacity is not None and self.routing.capacity.disabled


class BackendTLS(_Model):
    enabled: bool = False
    ca_config_map: str | None = None


class KubernetesPublish(_Model):
    enabled: bool = False
    field_manager: str = "gridroute-trafficmap"


class GatewayAddress(_Model):
    """One of a Gateway's `status.addresses` (Gateway API `GatewayStatusAddress`)."""

    type: Literal["IPAddress", "Hostname"] = "IPAddress"
    value: str = Field(min_length=1, max_length=253)

    @model_validator(mode="after")
    def _ip(self) -> GatewayAddress:
        if self.type == "IPAddress":
            try:
                ipaddress.ip_address(self.value)
            except ValueError:
                raise ValueError(f"not an IP address: {self.value!r}") from None
        return self


class WorkloadGateway(_Model):
    """A workload cluster's own Gateway, the one its homes' endpoints are served by:
    EndpointSlice backends copy the IP addresses of its `status.addresses`."""

    addresses: list[GatewayAddress] | None = None
    """The addresses, given here."""
    file: Path | None = None
    """A Gateway object file (`kubectl get gateway NAME -o yaml` of the workload cluster),
    read on every pass; relative to this file."""

    @model_validator(mode="after")
    def _one(self) -> WorkloadGateway:
        if (self.addresses is None) == (self.file is None):
            raise ValueError("give exactly one of addresses and file")
        return self


class Publish(_Model):
    """Where routes go; the four route fields mirror OME's publisher options."""

    directory: Path | None = Path("routes")
    """One YAML file per route (the GitOps path); relative to this file."""
    overlay: Path | None = None
    """A JSON file of `traffic_weight`s per service for gridroute's own gateways."""
    kubernetes: KubernetesPublish = KubernetesPublish()
    global_gateway: str | None = Field(None, pattern=r"^([a-z0-9-]+/)?[a-z0-9-]+$")
    """`namespace/name` of the global Gateway. Unset: Published False, Withdrawn."""
    backend_port: int | None = Field(None, ge=1, le=65535)
    global_host_template: str | None = None
    """Used for a service without `globalHost`: `{{.Name}}` and `{{.Namespace}}` only."""
    route_namespace: Name | None = None
    rewrite_hostname: bool = False
    backend_tls: BackendTLS = Field(BackendTLS(), alias="backendTLS")
    backend_type: Literal["ExternalName", "EndpointSlice"] = "ExternalName"
    """ExternalName Services (OME's), or the EndpointSlice fallback for a global gateway
    that does not route to ExternalName: a selector-less Service whose EndpointSlices
    hold each cluster's workload Gateway IPs (`workloadGateways`)."""
    backend_namespace: Literal["route", "service"] = "route"
    """With `routeNamespace`: the backends live beside the route, or stay in the
    service's namespace with a ReferenceGrant that lets the route name them."""
    workload_gateways: dict[Name, WorkloadGateway] = {}
    """Per workload cluster, its own Gateway (for `backendType: EndpointSlice`)."""


class OperatorTLS(_Model):
    """Client certificate for reading https operators (they require mutual TLS)."""

    ca: Path
    """CA bundle the operators' certificates chain to."""
    cert: Path
    key: Path


class ControlConfig(_Model):
    """control.yaml, except `services` (each validated on its own: `load`)."""

    store: Path = Path("state")
    """Directory holding maps and drains (the embedded store); relative to this file."""
    map_store: Literal["directory", "kubernetes"] = "directory"
    """Where the maps live: in `store`, or as `trafficmaps.ome.io` objects in the cluster
    of the local credentials (the CRD in deploy/kubernetes/; field manager
    `publish.kubernetes.fieldManager`). Drains and sources stay in `store`."""
    reconcile_interval_seconds: float = Field(5.0, gt=0)
    probe: ProbeSpec = ProbeSpec()
    capacity_polling: CapacityPolling = CapacityPolling()
    publish: Publish = Publish()
    operator_tls: OperatorTLS | None = Field(None, alias="operatorTLS")
    """Needed when operators' URLs are https; relative paths are taken from this file."""
    services: list[Any] = []


@dataclass(frozen=True, slots=True)
class Refused:
    """A service whose entry in control.yaml is invalid: its map keeps its last table."""

    name: str
    namespace: str
    message: str


@dataclass(frozen=True, slots=True)
class Loaded:
    config: ControlConfig
    services: tuple[ServiceConfig, ...]
    refused: tuple[Refused, ...]
    base: Path
    """Directory relative paths in the file are taken from."""

    def path(self, p: Path) -> Path:
        return p if p.is_absolute() else self.base / p


def _where(loc: tuple[int | str, ...], raw: Any) -> str:
    """A pydantic location with list indexes replaced by the name of the item there."""
    parts: list[str] = []
    node = raw
    for part in loc:
        if isinstance(part, int) and isinstance(node, list) and part < len(node):
            item = node[part]
            key = None
            if isinstance(item, dict):
                key = item.get("name") or item.get("cluster")
            parts[-1:] = [f"{parts[-1] if parts else ''}[{key if key else part}]"]
            node = item
            continue
        parts.append(str(part))
        node = node.get(part) if isinstance(node, dict) else None
    return ".".join(parts) or "(top level)"


def _problems(exc: ValidationError, raw: Any, prefix: str = "") -> list[Problem]:
    """Each pydantic error with its field named by service and cluster, not by index."""
    problems = []
    for err in exc.errors():
        where = _where(tuple(err["loc"]), raw)
        shown = err["loc"] and "input" in err and err["type"] != "missing"
        got = f" (got {str(repr(err['input']))[:80]})" if shown else ""
        msg = err["msg"].removeprefix("Value error, ")
        field = prefix.rstrip(".") if where == "(top level)" and prefix else prefix + where
        problems.append(Problem(field, f"{msg}{got}"))
    return problems


def _lines(source: str, problems: list[Problem]) -> str:
    return "\n".join(f"{source}: {p.field}: {p.reason}" for p in problems)


def parse(data: Any, source: str, base: Path) -> Loaded:
    """Validate control.yaml's mapping: the top level whole, each service on its own."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError.one(source, "(top level)", "expected a mapping")
    try:
        config = ControlConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, _problems(exc, data)) from None
    services, refused, seen = [], [], set()
    for raw in config.services:
        name = raw.get("name", "?") if isinstance(raw, dict) else "?"
        namespace = raw.get("namespace", "default") if isinstance(raw, dict) else "default"
        key = (str(namespace), str(name))
        prefix = f"services[{name}]."
        if key in seen:
            message = _lines(source, [Problem(f"{prefix}name", "listed twice")])
            refused.append(Refused(str(name), str(namespace), message))
            continue
        seen.add(key)
        try:
            service = ServiceConfig.model_validate(raw)
        except ValidationError as exc:
            message = _lines(source, _problems(exc, raw, prefix))
            refused.append(Refused(str(name), str(namespace), message))
            continue
        try:
            service.probe(config.probe)
        except ValidationError as exc:
            inline = raw.get("routing", {}).get("probe", {})
            message = _lines(source, _problems(exc, inline, f"{prefix}routing.probe."))
            refused.append(Refused(str(name), str(namespace), message))
            continue
        services.append(service)
    return Loaded(config, tuple(services), tuple(refused), base)


def load(path: Path) -> Loaded:
    """Read and validate control.yaml at `path` (file-level problems: `ConfigError`)."""
    return parse(read_mapping(path), str(path), path.parent)


def named_files(loaded: Loaded) -> dict[str, Path | None]:
    """Every file control.yaml names for reading, by field, relative paths taken from the
    file's directory: the operators' client certificate and each workload Gateway file.
    What it writes (`store`, `publish.directory`, `publish.overlay`) is not listed."""
    files: dict[str, Path | None] = {}
    t = loaded.config.operator_tls
    if t is not None:
        files |= {f"operatorTLS.{name}": loaded.path(getattr(t, name)) for name in TLS_FILES}
    for cluster, gw in loaded.config.publish.workload_gateways.items():
        if gw.file is not None:
            files[f"publish.workloadGateways.{cluster}.file"] = loaded.path(gw.file)
    return files


TLS_FILES = ("ca", "cert", "key")


def tls_blocks(loaded: Loaded) -> list[tls.TLSFiles]:
    """The TLS context the control plane builds toward https operators, if any."""
    t = loaded.config.operator_tls
    if t is None:
        return []
    ca, cert, key = (tls.Pem(f"operatorTLS.{n}", loaded.path(getattr(t, n))) for n in TLS_FILES)
    return [tls.TLSFiles(ca, cert, key)]


def check(path: Path, *, files: bool = True) -> Loaded:
    """`load`, with every refused service an error too (what `gridroute config check` runs);
    with `files`, every file it reads exists and is readable, and the operators' client
    certificate loads into a TLS context."""
    loaded = load(path)
    if loaded.refused:
        problems = []
        for r in loaded.refused:
            for line in r.message.splitlines():
                field, _, reason = line.removeprefix(f"{path}: ").partition(": ")
                problems.append(Problem(field, reason))
        raise ConfigError(str(path), problems)
    if files:
        check_files(str(path), named_files(loaded))
        tls.check(str(path), tls_blocks(loaded))
    return loaded
