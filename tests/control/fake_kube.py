"""An in-memory stand-in for `kubernetes.dynamic.DynamicClient`: server-side apply,
get by label, delete; and failures on cue."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any


class ApiError(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"({status}) {reason}")
        self.status = status


@dataclass(frozen=True)
class Resource:
    api_version: str
    kind: str


class Resources:
    def get(self, api_version: str, kind: str) -> Resource:
        return Resource(api_version, kind)


@dataclass
class FakeDynamicClient:
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    applies: list[dict[str, Any]] = field(default_factory=list)
    fail_next: int = 0
    fail_always: bool = False
    resources: Resources = field(default_factory=Resources)

    def _maybe_fail(self) -> None:
        if self.fail_always:
            raise ApiError(503, "apiserver unavailable")
        if self.fail_next > 0:
            self.fail_next -= 1
            raise ApiError(500, "etcdserver: request timed out")

    def server_side_apply(self, resource, body=None, name=None, namespace=None,
                          force_conflicts=None, **kwargs):  # fmt: skip
        self._maybe_fail()
        self.applies.append({"kind": resource.kind, "name": name, "namespace": namespace,
                             "force_conflicts": force_conflicts, **kwargs})  # fmt: skip
        self.objects[(resource.kind, namespace, name)] = copy.deepcopy(body)
        return body

    def get(self, resource, name=None, namespace=None, label_selector=None, **kwargs):
        self._maybe_fail()
        wanted = [p.partition("=") for p in (label_selector or "").split(",") if p]
        items = [
            o for (kind, ns, _), o in sorted(self.objects.items())
            if kind == resource.kind and ns == namespace
            and all(o["metadata"].get("labels", {}).get(k) == v for k, _, v in wanted)
        ]  # fmt: skip
        return {"items": items}

    def delete(self, resource, name=None, namespace=None, **kwargs):
        self._maybe_fail()
        if (resource.kind, namespace, name) not in self.objects:
            raise ApiError(404, "not found")
        del self.objects[(resource.kind, namespace, name)]

    def kinds(self) -> list[str]:
        return sorted(k for k, _, _ in self.objects)

    def route_weights(self, namespace: str, name: str) -> list[int]:
        route = self.objects[("HTTPRoute", namespace, name)]
        return [r["weight"] for r in route["spec"]["rules"][0]["backendRefs"]]
