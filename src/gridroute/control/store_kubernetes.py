"""TrafficMaps kept as Kubernetes objects (`mapStore: kubernetes`): `trafficmaps.ome.io`
objects of the CRD in deploy/kubernetes/, where `kubectl get tm` reads them.

Each write is two server-side applies with the control plane's field manager (forced, as
a controller owning its objects does): the object (labels, annotations, finalizers,
spec) and then its `status` subresource, the way a controller writes status. The API
server owns `metadata.generation`; it moves exactly when the applied spec changed, as
the reconcile loop's own count does (a `kubectl edit` of the spec moves it too, and the
next pass undoes the edit, moving it once more). Removing a map first applies it without
the publisher's finalizer, then deletes it. Every call is retried with backoff; a call
that fails on every attempt is `StoreUnavailable`, which fails the pass (a map
is never rebuilt as if none were stored because the API did not answer).

Drain records and service sources stay in the directory store (`store:`): without an
InferenceService there is no object to carry the `ome.io/traffic-drain` annotation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from gridroute.control.config import Loaded
from gridroute.control.kube_client import (
    ClusterClient,
    KubeCallError,
    as_dict,
    from_kubeconfig,
    not_found,
    retry,
)
from gridroute.control.store import MapBackend, Store, StoreError, StoreUnavailable
from gridroute.wire.trafficmap import API_VERSION, KIND, Metadata, TrafficMap

_METADATA = {info.alias or name for name, info in Metadata.model_fields.items()}
"""The metadata fields a map carries; the server's own (resourceVersion, managedFields,
...) are dropped on read."""


def _parse(obj: dict[str, Any]) -> TrafficMap:
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k in _METADATA}
    data = {**obj, "metadata": meta}
    data.setdefault("status", {})
    try:
        return TrafficMap.model_validate(data)
    except ValidationError as exc:
        where = f"{meta.get('namespace')}/{meta.get('name')}"
        raise StoreError(
            f"trafficmap {where}: not a TrafficMap: {exc.errors()[0]['msg']}"
        ) from None


class KubernetesMaps(ClusterClient):
    """The map half of `Store`, on a cluster."""

    def _resource(self) -> Any:
        return self.client.resources.get(api_version=API_VERSION, kind=KIND)

    def _call(self, what: str, call: Callable[[], Any], missing_ok: bool = False) -> Any:
        try:
            return retry(
                what,
                call,
                attempts=self.attempts,
                backoff_s=self.backoff_s,
                sleep=self.sleep,
                give_up=not_found if missing_ok else lambda _: False,
            )
        except KubeCallError as exc:
            cause = exc.__cause__
            if missing_ok and isinstance(cause, Exception) and not_found(cause):
                return None
            raise StoreUnavailable(str(exc)) from exc.__cause__

    def _raw(self, namespace: str, name: str) -> dict[str, Any] | None:
        found = self._call(
            f"get trafficmap {namespace}/{name}",
            lambda: self.client.get(self._resource(), name=name, namespace=namespace),
            missing_ok=True,
        )
        return None if found is None else as_dict(found)

    def read_map(self, namespace: str, name: str) -> TrafficMap | None:
        raw = self._raw(namespace, name)
        return None if raw is None else _parse(raw)

    def stored_generation(self, namespace: str, name: str) -> int | None:
        raw = self._raw(namespace, name)
        try:
            return None if raw is None else int(raw["metadata"]["generation"])
        except (KeyError, TypeError, ValueError):
            return None

    def _apply(self, what: str, resource: Any, body: dict[str, Any]) -> None:
        meta = body["metadata"]
        self._call(
            what,
            lambda: self.client.server_side_apply(
                resource,
                body=body,
                name=meta["name"],
                namespace=meta["namespace"],
                force_conflicts=True,
                field_manager=self.field_manager,
            ),
        )

    def write_map(self, tm: TrafficMap) -> None:
        wire = tm.wire()
        meta = {k: v for k, v in wire["metadata"].items()
                if k not in ("generation", "uid", "creationTimestamp")}  # fmt: skip
        where = f"{meta['namespace']}/{meta['name']}"
        head = {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta}
        self._apply(f"apply trafficmap {where}", self._resource(), {**head, "spec": wire["spec"]})
        status = {**head, "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
                  "status": wire.get("status", {})}  # fmt: skip
        self._apply(f"apply trafficmap {where} status", self._resource().status, status)

    def delete_map(self, namespace: str, name: str) -> None:
        head = {"apiVersion": API_VERSION, "kind": KIND,
                "metadata": {"name": name, "namespace": namespace, "finalizers": []}}  # fmt: skip
        if self._raw(namespace, name) is None:
            return
        self._apply(f"release trafficmap {namespace}/{name}", self._resource(), head)
        self._call(
            f"delete trafficmap {namespace}/{name}",
            lambda: self.client.delete(self._resource(), name=name, namespace=namespace),
            missing_ok=True,
        )

    def maps(self) -> list[TrafficMap]:
        """Every readable map in every namespace, sorted (unreadable ones skipped)."""
        listed = as_dict(self._call("list trafficmaps", lambda: self.client.get(self._resource())))
        items = listed.get("items", []) if isinstance(listed, dict) else []
        out = []
        for item in items:
            try:
                out.append(_parse(as_dict(item)))
            except StoreError:
                continue
        return sorted(out, key=lambda m: (m.metadata.namespace, m.metadata.name))


def maps_from_kubeconfig(field_manager: str) -> KubernetesMaps:
    """Maps on the in-cluster config, or the local kubeconfig."""
    try:
        return KubernetesMaps(from_kubeconfig(), field_manager)
    except ImportError:
        raise StoreError(
            "mapStore: kubernetes needs the kubernetes extra: pip install 'gridroute[kubernetes]'"
        ) from None


class StoreOpener:
    """The store of a control.yaml: its directory, with the maps in the cluster when
    `mapStore: kubernetes` (one client, made on first use; or the one handed in)."""

    def __init__(self, maps: MapBackend | None = None) -> None:
        self._maps = maps

    def __call__(self, loaded: Loaded) -> Store:
        cfg = loaded.config
        if cfg.map_store == "kubernetes" and self._maps is None:
            self._maps = maps_from_kubeconfig(cfg.publish.kubernetes.field_manager)
        maps = self._maps if cfg.map_store == "kubernetes" else None
        return Store(loaded.path(cfg.store), maps)
