"""The IP addresses of each workload cluster's own Gateway, for EndpointSlice backends.

`publish.workloadGateways` names them per cluster, given in control.yaml or read from a
Gateway object file (the workload cluster's `kubectl get gateway -o yaml`, kept current
by whatever syncs it) on every pass. Only IP addresses count (`status.addresses` of type
IPAddress); a cluster whose Gateway has none, whose file cannot be read, or that is not
configured at all gets a reason instead, and a route with such a home is not applied
(ApplyFailed: the last published route keeps its weights).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from gridroute.control.config import Loaded
from gridroute.wire.route_backends import ip_addresses


@dataclass(frozen=True, slots=True)
class Addresses:
    found: dict[str, tuple[str, ...]]
    """cluster -> its Gateway's IP addresses (never empty)."""
    errors: dict[str, str]
    """cluster -> why it has none."""


def _from_file(path: Path) -> tuple[tuple[str, ...], str | None]:
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        return (), f"cannot read {path}: {exc.strerror or exc}"
    except yaml.YAMLError:
        return (), f"{path} is not YAML"
    if not isinstance(doc, dict) or doc.get("kind") != "Gateway":
        return (), f"{path} is not a Gateway object"
    status = doc.get("status") if isinstance(doc.get("status"), dict) else {}
    raw = status.get("addresses") if isinstance(status, dict) else None
    found = ip_addresses([a for a in raw or [] if isinstance(a, dict)])
    if not found:
        return (), f"{path}: the Gateway has no IP address in status.addresses"
    return found, None


def resolve(loaded: Loaded) -> Addresses:
    """Every configured cluster's addresses, or why there are none."""
    found: dict[str, tuple[str, ...]] = {}
    errors: dict[str, str] = {}
    for cluster, gw in loaded.config.publish.workload_gateways.items():
        if gw.file is not None:
            ips, why = _from_file(loaded.path(gw.file))
        else:
            ips = ip_addresses([a.model_dump() for a in gw.addresses or []])
            why = None if ips else "its addresses hold no IPAddress"
        if ips:
            found[cluster] = ips
        else:
            errors[cluster] = why or "no IP address"
    return Addresses(found, errors)
