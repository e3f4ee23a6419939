"""The Kubernetes publisher: the rendered route applied to a cluster with server-side
apply, through the official `kubernetes` client (`pip install 'gridroute[kubernetes]'`).

Each object is applied with one field manager (`publish.kubernetes.fieldManager`) and
`force_conflicts`, as a controller that owns its objects does. The backends go first and
the HTTPRoute last, so the route never points at a Service that is not there; backends
of clusters that left the map are pruned after the route no longer names them. Each
call is retried with exponential backoff; when the retries run out the publish fails and
whatever was applied last stays (the route keeps its last good weights).

Only the slice of `kubernetes.dynamic.DynamicClient` below is used, so tests drive the
publisher with a fake client and no cluster.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from gridroute.control.publish_directory import PublishError
from gridroute.wire.httproute import ISVC_LABEL, RenderedRoute

log = logging.getLogger(__name__)

KINDS = {
    "HTTPRoute": "gateway.networking.k8s.io/v1",
    "Service": "v1",
    "BackendTLSPolicy": "gateway.networking.k8s.io/v1",
}


class DynamicClient(Protocol):
    """What the publisher needs of `kubernetes.dynamic.DynamicClient`."""

    resources: Any

    def server_side_apply(
        self,
        resource: Any,
        body: Any = None,
        name: str | None = None,
        namespace: str | None = None,
        force_conflicts: bool | None = None,
        **kwargs: Any,
    ) -> Any: ...

    def delete(
        self, resource: Any, name: str | None = None, namespace: str | None = None, **kwargs: Any
    ) -> Any: ...

    def get(
        self, resource: Any, name: str | None = None, namespace: str | None = None, **kwargs: Any
    ) -> Any: ...


def _not_found(exc: Exception) -> bool:
    return getattr(exc, "status", None) == 404


class KubernetesPublisher:
    name = "kubernetes"

    def __init__(
        self,
        client: DynamicClient,
        field_manager: str,
        *,
        attempts: int = 4,
        backoff_s: float = 0.2,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.client = client
        self.field_manager = field_manager
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.sleep = sleep

    def _resource(self, kind: str) -> Any:
        return self.client.resources.get(api_version=KINDS[kind], kind=kind)

    def _retry(self, what: str, call: Callable[[], Any]) -> Any:
        delay = self.backoff_s
        for attempt in range(1, self.attempts + 1):
            try:
                return call()
            except Exception as exc:
                if attempt == self.attempts:
                    raise PublishError(f"{what}: {exc}") from exc
                log.warning("%s failed (attempt %d of %d): %s", what, attempt, self.attempts, exc)
                self.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    def _apply(self, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        resource = self._resource(obj["kind"])
        self._retry(
            f"apply {obj['kind']} {meta['namespace']}/{meta['name']}",
            lambda: self.client.server_side_apply(
                resource,
                body=obj,
                name=meta["name"],
                namespace=meta["namespace"],
                force_conflicts=True,
                field_manager=self.field_manager,
            ),
        )

    def _delete(self, kind: str, namespace: str, name: str) -> None:
        resource = self._resource(kind)

        def call() -> None:
            try:
                self.client.delete(resource, name=name, namespace=namespace)
            except Exception as exc:
                if not _not_found(exc):
                    raise

        self._retry(f"delete {kind} {namespace}/{name}", call)

    def _owned(self, kind: str, namespace: str, service: str) -> list[str]:
        resource = self._resource(kind)
        listed = self._retry(
            f"list {kind} in {namespace}",
            lambda: self.client.get(
                resource, namespace=namespace, label_selector=f"{ISVC_LABEL}={service}"
            ),
        )
        items = listed.get("items", []) if isinstance(listed, dict) else listed.items
        return [
            item["metadata"]["name"] if isinstance(item, dict) else item.metadata.name
            for item in items
        ]

    def apply(self, rendered: RenderedRoute) -> None:
        """Backends, then policies, then the route; then prune backends it dropped."""
        for obj in [*rendered.services, *rendered.policies, rendered.route]:
            self._apply(obj)
        meta = rendered.route["metadata"]
        service = meta["labels"][ISVC_LABEL]
        for kind, objs in (("BackendTLSPolicy", rendered.policies), ("Service", rendered.services)):
            keep = {o["metadata"]["name"] for o in objs}
            for name in self._owned(kind, meta["namespace"], service):
                if name not in keep:
                    self._delete(kind, meta["namespace"], name)

    def remove(self, namespace: str, name: str, service: str | None = None) -> None:
        """The route first (traffic stops), then the backends it owned."""
        self._delete("HTTPRoute", namespace, name)
        if service is None:
            service = name.removesuffix("-global")
        for kind in ("BackendTLSPolicy", "Service"):
            for owned in self._owned(kind, namespace, service):
                self._delete(kind, namespace, owned)


def from_kubeconfig(field_manager: str) -> KubernetesPublisher:
    """A publisher on the in-cluster config, or the local kubeconfig."""
    try:
        from kubernetes import client, config, dynamic
    except ImportError:
        raise PublishError(
            "publish.kubernetes needs the kubernetes extra: pip install 'gridroute[kubernetes]'"
        ) from None
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    return KubernetesPublisher(dynamic.DynamicClient(client.ApiClient()), field_manager)
