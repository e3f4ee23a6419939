"""The ReferenceGrant (`gateway.networking.k8s.io/v1beta1`) schema, transcribed from the
Gateway API v1.6 specification (`ReferenceGrantSpec`, `ReferenceGrantFrom`,
`ReferenceGrantTo`): the fixtures hold no ReferenceGrant CRD, so its constraints are
written out here, field for field, as a JSON Schema for `crd_schema.errors`."""

from __future__ import annotations

from typing import Any

DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
GROUP = {"type": "string", "maxLength": 253, "pattern": r"^$|" + DNS_SUBDOMAIN}
KIND = {"type": "string", "minLength": 1, "maxLength": 63,
        "pattern": r"^[a-zA-Z]([-a-zA-Z0-9]*[a-zA-Z0-9])?$"}  # fmt: skip
NAMESPACE = {"type": "string", "minLength": 1, "maxLength": 63,
             "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"}  # fmt: skip

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "apiVersion": {"const": "gateway.networking.k8s.io/v1beta1"},
        "kind": {"const": "ReferenceGrant"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "required": ["from", "to"],
            "properties": {
                "from": {
                    "type": "array", "minItems": 1, "maxItems": 16,
                    "items": {
                        "type": "object", "required": ["group", "kind", "namespace"],
                        "properties": {"group": GROUP, "kind": KIND, "namespace": NAMESPACE},
                    },
                },
                "to": {
                    "type": "array", "minItems": 1, "maxItems": 16,
                    "items": {
                        "type": "object", "required": ["group", "kind"],
                        "properties": {
                            "group": GROUP, "kind": KIND,
                            "name": {"type": "string", "minLength": 1, "maxLength": 253},
                        },
                    },
                },
            },
        },
    },
}  # fmt: skip
