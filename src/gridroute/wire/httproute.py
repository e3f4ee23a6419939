"""The Gateway API objects a TrafficMap is published as, rendered the way OME's
`gatewayapi` publisher writes them (reference 4.5).

* One `HTTPRoute` (`gateway.networking.k8s.io/v1`) named `<service>-global` in the
  service's namespace (with `route_namespace` set: `<service>-<hash>-global` there),
  labelled `ome.io/placement-endpoint-isvc`, parented to the global gateway, for the one
  global hostname, matching every path (prefix `/`, the client's path kept).
* One rule, one backendRef per map entry at the entry's weight, weight 0 included, sorted
  by cluster whatever the map's order; more than 16 entries is `InvalidPlan` (one rule
  holds at most 16 backendRefs).
* The global hostname and each entry's endpoint host must be lowercase RFC 1123 names,
  not IP addresses (the global one may start with `*.`); the host is read as written, not
  lowercased. Anything else is `InvalidPlan`, naming the field (`globalHost`,
  `globalHostTemplate` or the entry's endpoint).
* Each backendRef is an `ExternalName` Service `tmb-<hash>` pointing at the home's host
  on `backend_port` (or, with `backend_type` EndpointSlice, a selector-less Service and
  EndpointSlices holding the IPs of the home cluster's own Gateway: `route_backends`);
  with `rewrite_hostname` it carries a `URLRewrite` filter setting the hostname; with
  `backend_tls` a `BackendTLSPolicy` per backend validates that host.
* The backends live in the route's namespace; with `backend_namespace` "service" and a
  `route_namespace` of its own, they stay in the service's namespace, the backendRefs
  name that namespace, and a `ReferenceGrant` there allows the route to use them. If an
  EndpointSlice backend has no IP address the publish fails (`ApplyFailed`): the last
  published route, with its weights, stays.

Nothing here talks to a cluster: `render` turns a map and options into plain dicts, or
says why it cannot (`PlanRefused`, whose outcome is the Published reason).
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlsplit

from gridroute.core.trafficmap_publication import PublishOutcome
from gridroute.wire.route_backends import (
    endpoint_slices,
    external_name_service,
    reference_grant,
    selectorless_service,
)
from gridroute.wire.trafficmap import DNS_LABEL, TrafficMap

GROUP = "gateway.networking.k8s.io"
MAX_BACKEND_REFS = 16
ISVC_LABEL = "ome.io/placement-endpoint-isvc"
NAMESPACE_LABEL = "gridroute.io/service-namespace"
"""With ISVC_LABEL, selects one service's objects: two namespaces' `chat` publishing
into one route namespace never prune each other's backends."""
MANAGED_BY = {"app.kubernetes.io/managed-by": "gridroute"}
_TEMPLATE_FIELD = re.compile(r"\{\{\s*\.(\w+)\s*\}\}")


class PlanRefused(Exception):
    """The map cannot be rendered; `outcome` is the Published reason to report."""

    def __init__(self, outcome: PublishOutcome, message: str) -> None:
        super().__init__(message)
        self.outcome = outcome


@dataclass(frozen=True, slots=True)
class RouteOptions:
    """Where and how to publish (OME's `globalGateway`, `backendPort`, ...)."""

    global_gateway: str | None = None
    """`namespace/name` of the Gateway the route attaches to."""
    backend_port: int | None = None
    hostname: str | None = None
    """The global host; the `ome.io/global-host` annotation's role."""
    host_template: str | None = None
    """Used when `hostname` is unset; may use only `{{.Name}}` and `{{.Namespace}}`."""
    route_namespace: str | None = None
    rewrite_hostname: bool = False
    backend_tls: bool = False
    ca_config_map: str | None = None
    """ConfigMap holding the CA for backend TLS; the system CAs when unset."""
    section_name: str | None = None
    backend_type: Literal["ExternalName", "EndpointSlice"] = "ExternalName"
    backend_namespace: Literal["route", "service"] = "route"
    """Where the backends live when the route has a namespace of its own."""
    addresses: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """EndpointSlice backends: cluster -> IP addresses of its workload Gateway."""
    address_errors: Mapping[str, str] = field(default_factory=dict)
    """EndpointSlice backends: cluster -> why its addresses could not be read."""


@dataclass(frozen=True, slots=True)
class RenderedRoute:
    route: dict[str, Any]
    services: list[dict[str, Any]] = field(default_factory=list)
    policies: list[dict[str, Any]] = field(default_factory=list)
    endpoint_slices: list[dict[str, Any]] = field(default_factory=list)
    grants: list[dict[str, Any]] = field(default_factory=list)

    @property
    def objects(self) -> list[dict[str, Any]]:
        return [self.route, *self.services, *self.endpoint_slices, *self.policies, *self.grants]

    @property
    def backend_namespace(self) -> str:
        """Where the Services (and slices, policies, grant) live."""
        if self.services:
            return str(self.services[0]["metadata"]["namespace"])
        return str(self.route["metadata"]["namespace"])

    def weights(self) -> dict[str, int]:
        """Weight per backend Service name, as the gateway will read them."""
        refs = self.route["spec"]["rules"][0]["backendRefs"]
        return {ref["name"]: ref["weight"] for ref in refs}


def _digest(*parts: str, n: int) -> str:
    return hashlib.sha256("/".join(parts).encode()).hexdigest()[:n]


def expand_host_template(template: str, name: str, namespace: str) -> str:
    """`{{.Name}}` and `{{.Namespace}}` filled in; any other field is refused."""
    values = {"Name": name, "Namespace": namespace}

    def fill(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in values:
            raise PlanRefused(
                PublishOutcome.INVALID_OPTIONS,
                f"globalHostTemplate may use only {{{{.Name}}}} and {{{{.Namespace}}}}, got {key}",
            )
        return values[key]

    return _TEMPLATE_FIELD.sub(fill, template)


def route_name(service: str, namespace: str, route_namespace: str | None) -> str:
    if route_namespace is None or route_namespace == namespace:
        return f"{service}-global"
    return f"{service}-{_digest(namespace, service, n=8)}-global"


def backend_name(namespace: str, service: str, cluster: str) -> str:
    return f"tmb-{_digest(namespace, service, cluster, n=10)}"


def grant_name(route_namespace: str, namespace: str, service: str) -> str:
    return f"tmg-{_digest(route_namespace, namespace, service, n=10)}"


def labels_of(service: str, namespace: str) -> dict[str, str]:
    return {ISVC_LABEL: service, NAMESPACE_LABEL: namespace, **MANAGED_BY}


def selector_of(service: str, namespace: str) -> str:
    """The label selector of one service's objects (the Kubernetes publisher prunes by it)."""
    return f"{ISVC_LABEL}={service},{NAMESPACE_LABEL}={namespace}"


def _addresses(cluster: str, opts: RouteOptions) -> tuple[str, ...]:
    found = opts.addresses.get(cluster, ())
    if not found:
        why = opts.address_errors.get(cluster, "no workload Gateway is configured for it")
        raise PlanRefused(
            PublishOutcome.APPLY_FAILED,
            f"entry {cluster}: EndpointSlice backends need an IP address of its workload "
            f"Gateway: {why}",
        )
    return found


def claimed_target(namespace: str, name: str) -> str:
    return f"v1:httproute:{namespace}/{name}"


def hostname_problem(host: str, *, wildcard: bool = False) -> str | None:
    """Why `host` cannot be a Gateway API hostname, or None: it must be a lowercase RFC 1123
    name (labels of `a-z`, `0-9` and `-`, at most 63 characters each, 253 in all), not an
    IP address; with `wildcard`, a leading `*.` is allowed (OME's validateGatewayAPIHostname)."""
    name = host[2:] if wildcard and host.startswith("*.") else host
    try:
        ipaddress.ip_address(name)
    except ValueError:
        pass
    else:
        return "must not be an IP address"
    if not name or len(name) > 253 or not all(DNS_LABEL.match(p) for p in name.split(".")):
        return (
            "is not a lowercase RFC 1123 hostname (labels of a-z, 0-9 and '-', "
            "at most 63 characters each, 253 in all)"
        )
    return None


def _raw_host(endpoint: str) -> str:
    """The endpoint's host as written (`urlsplit().hostname` would lowercase it)."""
    netloc = urlsplit(endpoint).netloc.rpartition("@")[2]
    if netloc.startswith("["):
        return netloc[1:].partition("]")[0]
    return netloc.partition(":")[0]


def _host(endpoint: str | None, cluster: str) -> str:
    field = f"entry {cluster}: endpoint {endpoint!r}"
    try:
        host = _raw_host(endpoint or "")
    except ValueError as exc:
        raise PlanRefused(PublishOutcome.INVALID_PLAN, f"{field}: not a URL: {exc}") from None
    if not host:
        raise PlanRefused(PublishOutcome.INVALID_PLAN, f"{field} has no host")
    problem = hostname_problem(host)
    if problem is not None:
        raise PlanRefused(
            PublishOutcome.INVALID_PLAN, f"{field}: backend hostname {host!r} {problem}"
        )
    return host


def _global_host(tm: TrafficMap, opts: RouteOptions) -> str | None:
    if opts.hostname:
        return opts.hostname
    if opts.host_template:
        return expand_host_template(opts.host_template, tm.metadata.name, tm.metadata.namespace)
    return None


def _check_global_host(host: str, opts: RouteOptions) -> None:
    problem = hostname_problem(host, wildcard=True)
    if problem is not None:
        field = "globalHost" if opts.hostname else f"globalHostTemplate {opts.host_template!r}"
        raise PlanRefused(
            PublishOutcome.INVALID_PLAN, f"{field}: global hostname {host!r} {problem}"
        )


def render(tm: TrafficMap, opts: RouteOptions) -> RenderedRoute:
    """The route, Services and policies for `tm`; raises `PlanRefused` with the reason."""
    host = _global_host(tm, opts)
    if not opts.global_gateway or opts.backend_port is None or not host:
        raise PlanRefused(
            PublishOutcome.WITHDRAWN, "globalGateway, backendPort and a hostname are all needed"
        )
    _check_global_host(host, opts)
    entries = tm.spec.entries
    if len(entries) > MAX_BACKEND_REFS:
        raise PlanRefused(
            PublishOutcome.INVALID_PLAN,
            f"{len(entries)} entries; one HTTPRoute rule holds at most {MAX_BACKEND_REFS}",
        )
    gw_ns, _, gw_name = opts.global_gateway.rpartition("/")
    service, source_ns = tm.spec.service, tm.metadata.namespace
    namespace = opts.route_namespace or source_ns
    name = route_name(service, source_ns, opts.route_namespace)
    labels = labels_of(service, source_ns)
    backend_ns = source_ns if opts.backend_namespace == "service" else namespace

    parent: dict[str, Any] = {"group": GROUP, "kind": "Gateway", "name": gw_name}
    if gw_ns:
        parent["namespace"] = gw_ns
    if opts.section_name:
        parent["sectionName"] = opts.section_name

    refs, services, policies, slices = [], [], [], []
    for entry in sorted(entries, key=lambda e: e.cluster):  # OME sorts its homes by cluster
        backend_host = _host(entry.endpoint, entry.cluster)
        backend = backend_name(source_ns, service, entry.cluster)
        ref: dict[str, Any] = {
            "group": "",
            "kind": "Service",
            "name": backend,
            "port": opts.backend_port,
            "weight": entry.weight,
        }
        if backend_ns != namespace:
            ref["namespace"] = backend_ns
        if opts.rewrite_hostname:
            ref["filters"] = [{"type": "URLRewrite", "urlRewrite": {"hostname": backend_host}}]
        refs.append(ref)
        meta = {
            "name": backend,
            "namespace": backend_ns,
            "labels": {**labels, "ome.io/workload-cluster": entry.cluster},
        }
        if opts.backend_type == "EndpointSlice":
            services.append(selectorless_service(meta, opts.backend_port))
            slices += endpoint_slices(meta, _addresses(entry.cluster, opts), opts.backend_port)
        else:
            services.append(external_name_service(meta, backend_host, opts.backend_port))
        if opts.backend_tls:
            validation: dict[str, Any] = {"hostname": backend_host}
            if opts.ca_config_map:
                validation["caCertificateRefs"] = [
                    {"group": "", "kind": "ConfigMap", "name": opts.ca_config_map}
                ]
            else:
                validation["wellKnownCACertificates"] = "System"
            policies.append(
                {
                    "apiVersion": f"{GROUP}/v1",
                    "kind": "BackendTLSPolicy",
                    "metadata": dict(meta),
                    "spec": {
                        "targetRefs": [{"group": "", "kind": "Service", "name": backend}],
                        "validation": validation,
                    },
                }
            )
    grants = []
    if backend_ns != namespace and services:
        grant = grant_name(namespace, backend_ns, service)
        names = [svc["metadata"]["name"] for svc in services]
        grants.append(reference_grant(grant, backend_ns, labels, namespace, names))
    route = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "parentRefs": [parent],
            "hostnames": [host],
            "rules": [
                {
                    "matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                    "backendRefs": refs,
                }
            ],
        },
    }
    return RenderedRoute(route, services, policies, slices, grants)
