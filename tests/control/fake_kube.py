"""An in-memory stand-in for `kubernetes.dynamic.DynamicClient`: server-side apply
(the status subresource apart: an object's apply keeps its status, a status apply
changes only that), server-managed generation (moved by a spec change), uid and
creation time, get by name or label in one namespace or all, finalizers that hold a
deleted object, delete; and failures on cue."""

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

    @property
    def status(self) -> Resource:
        """The status subresource (`resource.status` of the real client)."""
        return Resource(self.api_version, f"{self.kind}/status")


class Resources:
    def get(self, api_version: str, kind: str) -> Resource:
        return Resource(api_version, kind)


@dataclass
class FakeDynamicClient:
    objects: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)
    applies: list[dict[str, Any]] = field(default_factory=list)
    fail_next: int = 0
    fail_always: bool = False
    serial: int = 0
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
        kind, _, sub = resource.kind.partition("/")
        key = (kind, namespace, name)
        before = self.objects.get(key)
        if sub == "status":
            if before is None:
                raise ApiError(404, "not found")
            before["status"] = copy.deepcopy(body.get("status", {}))
            return copy.deepcopy(before)
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if before is None:
            self.serial += 1
            meta.update(generation=1, uid=f"uid-{self.serial}",
                        creationTimestamp="2026-12-02T00:00:00Z")  # fmt: skip
        else:
            old = before["metadata"]
            changed = before.get("spec") != obj.get("spec")
            meta.update(generation=old.get("generation", 1) + int(changed), uid=old.get("uid"),
                        creationTimestamp=old.get("creationTimestamp"))  # fmt: skip
            if "status" in before and "status" not in obj:
                obj["status"] = before["status"]
            if "deletionTimestamp" in old:
                meta["deletionTimestamp"] = old["deletionTimestamp"]
        if not meta.get("finalizers"):
            meta.pop("finalizers", None)
            if "deletionTimestamp" in meta:  # the last finalizer went: the delete completes
                self.objects.pop(key, None)
                return obj
        self.objects[key] = obj
        return copy.deepcopy(obj)

    def get(self, resource, name=None, namespace=None, label_selector=None, **kwargs):
        self._maybe_fail()
        if name is not None:
            found = self.objects.get((resource.kind, namespace, name))
            if found is None:
                raise ApiError(404, "not found")
            return copy.deepcopy(found)
        wanted = [p.partition("=") for p in (label_selector or "").split(",") if p]
        items = [
            copy.deepcopy(o) for (kind, ns, _), o in sorted(self.objects.items())
            if kind == resource.kind and (namespace is None or ns == namespace)
            and all(o["metadata"].get("labels", {}).get(k) == v for k, _, v in wanted)
        ]  # fmt: skip
        return {"items": items}

    def delete(self, resource, name=None, namespace=None, **kwargs):
        self._maybe_fail()
        key = (resource.kind, namespace, name)
        if key not in self.objects:
            raise ApiError(404, "not found")
        if self.objects[key]["metadata"].get("finalizers"):
            self.objects[key]["metadata"]["deletionTimestamp"] = "2026-12-02T00:00:01Z"
            return
        del self.objects[key]

    def kinds(self) -> list[str]:
        return sorted(k for k, _, _ in self.objects)

    def route_weights(self, namespace: str, name: str) -> list[int]:
        route = self.objects[("HTTPRoute", namespace, name)]
        return [r["weight"] for r in route["spec"]["rules"][0]["backendRefs"]]
