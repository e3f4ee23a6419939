"""The Kubernetes objects behind an HTTPRoute's backendRefs, and the grant that lets a
route in one namespace name them in another.

Two kinds of backend (`publish.backendType`):

* `ExternalName` (the default, OME's): a Service whose `externalName` is the home's
  host; the global gateway resolves that name itself.
* `EndpointSlice` (the fallback for gateways that do not route to ExternalName Services,
  which Gateway API leaves to the implementation and many turn off): a Service without
  a selector, and one `discovery.k8s.io/v1` EndpointSlice per address family holding the
  IP addresses of the workload cluster's own Gateway (its `status.addresses`), on the
  same port. The global gateway then routes to those IPs as to any Service's endpoints.

A `ReferenceGrant` (`gateway.networking.k8s.io/v1beta1`) in the backends' namespace
allows HTTPRoutes of the route's namespace to reference exactly these Services: Gateway
API refuses a cross-namespace backendRef without one.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import Any

GROUP = "gateway.networking.k8s.io"
SLICE_MANAGER = "gridroute.io"
"""`endpointslice.kubernetes.io/managed-by`: never the EndpointSlice controller's own
value, so it leaves these slices alone."""
PORT_NAME = "http"


def external_name_service(meta: dict[str, Any], host: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": "ExternalName",
            "externalName": host,
            "ports": [{"name": PORT_NAME, "port": port, "protocol": "TCP"}],
        },
    }


def selectorless_service(meta: dict[str, Any], port: int) -> dict[str, Any]:
    """A Service whose endpoints are the EndpointSlices below (no selector: Kubernetes'
    EndpointSlice controller writes none for it)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "type": "ClusterIP",
            "ports": [{"name": PORT_NAME, "port": port, "protocol": "TCP", "targetPort": port}],
        },
    }


def endpoint_slices(
    meta: dict[str, Any], addresses: Sequence[str], port: int
) -> list[dict[str, Any]]:
    """One EndpointSlice per address family (a slice holds one), named
    `<service>-ipv4` / `-ipv6`, each address one ready endpoint."""
    families: dict[str, list[str]] = {}
    for raw in addresses:
        ip = ipaddress.ip_address(raw)
        families.setdefault(f"IPv{ip.version}", []).append(str(ip))
    service = meta["name"]
    out = []
    for family, ips in sorted(families.items()):
        labels = {
            **meta.get("labels", {}),
            "kubernetes.io/service-name": service,
            "endpointslice.kubernetes.io/managed-by": SLICE_MANAGER,
        }
        out.append(
            {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": f"{service}-{family.lower()}",
                    "namespace": meta["namespace"],
                    "labels": labels,
                },
                "addressType": family,
                "endpoints": [
                    {"addresses": [ip], "conditions": {"ready": True}} for ip in sorted(set(ips))
                ],
                "ports": [{"name": PORT_NAME, "port": port, "protocol": "TCP"}],
            }
        )
    return out


def ip_addresses(status_addresses: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """The IP addresses among a Gateway's `status.addresses` (type IPAddress, or no type,
    which Gateway API defaults to IPAddress); Hostname and named addresses are skipped."""
    out = []
    for addr in status_addresses:
        kind = addr.get("type") or "IPAddress"
        value = addr.get("value")
        if kind != "IPAddress" or not isinstance(value, str):
            continue
        try:
            out.append(str(ipaddress.ip_address(value)))
        except ValueError:
            continue
    return tuple(out)


def reference_grant(
    name: str,
    namespace: str,
    labels: dict[str, str],
    route_namespace: str,
    services: Sequence[str],
) -> dict[str, Any]:
    """Lets HTTPRoutes in `route_namespace` reference exactly `services` (in `namespace`)."""
    return {
        "apiVersion": f"{GROUP}/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "from": [{"group": GROUP, "kind": "HTTPRoute", "namespace": route_namespace}],
            "to": [{"group": "", "kind": "Service", "name": s} for s in services],
        },
    }
