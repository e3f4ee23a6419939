"""The Kubernetes publisher: the rendered route applied to a cluster with server-side
apply, through the official `kubernetes` client (`pip install 'gridroute[kubernetes]'`).

Each object is applied with one field manager (`publish.kubernetes.fieldManager`) and
`force_conflicts`, as a controller that owns its objects does. The backends (Services,
their EndpointSlices, BackendTLSPolicies, the ReferenceGrant) go first and the HTTPRoute
last, so the route never points at a Service that is not there; objects of clusters
that left the map are pruned after the route no longer names them, in every namespace
the service's objects may live in (the route's and the service's), selected by the
service's labels (`httproute.selector_of`). Each call is retried with exponential
backoff; when the retries run out the publish fails and whatever was applied last stays
(the route keeps its last good weights).

Only the slice of `kubernetes.dynamic.DynamicClient` in `kube_client` is used, so tests
drive the publisher with a fake client and no cluster.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from gridroute.control import kube_client
from gridroute.control.kube_client import (
    ClusterClient,
    KubeCallError,
    not_found,
    retry,
)
from gridroute.control.publish_directory import PublishError
from gridroute.wire.httproute import ISVC_LABEL, NAMESPACE_LABEL, RenderedRoute, selector_of

log = logging.getLogger(__name__)

KINDS = {
    "HTTPRoute": "gateway.networking.k8s.io/v1",
    "Service": "v1",
    "EndpointSlice": "discovery.k8s.io/v1",
    "BackendTLSPolicy": "gateway.networking.k8s.io/v1",
    "ReferenceGrant": "gateway.networking.k8s.io/v1beta1",
}
OWNED = ("ReferenceGrant", "BackendTLSPolicy", "EndpointSlice", "Service")
"""What a route owns besides itself, in the order it is pruned (grants first, Services
last: nothing is left pointing at a Service that is gone)."""


class KubernetesPublisher(ClusterClient):
    name = "kubernetes"

    def _resource(self, kind: str) -> Any:
        return self.client.resources.get(api_version=KINDS[kind], kind=kind)

    def _retry(self, what: str, call: Callable[[], Any]) -> Any:
        try:
            return retry(
                what, call, attempts=self.attempts, backoff_s=self.backoff_s, sleep=self.sleep
            )
        except KubeCallError as exc:
            raise PublishError(str(exc)) from exc.__cause__

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
                if not not_found(exc):
                    raise

        self._retry(f"delete {kind} {namespace}/{name}", call)

    def _owned(self, kind: str, namespace: str, selector: str) -> list[str]:
        resource = self._resource(kind)
        listed = self._retry(
            f"list {kind} in {namespace}",
            lambda: self.client.get(resource, namespace=namespace, label_selector=selector),
        )
        items = listed.get("items", []) if isinstance(listed, dict) else listed.items
        return [
            item["metadata"]["name"] if isinstance(item, dict) else item.metadata.name
            for item in items
        ]

    def _prune(self, namespaces: set[str], selector: str, keep: set[tuple[str, str, str]]) -> None:
        for kind in OWNED:
            for ns in sorted(namespaces):
                for name in self._owned(kind, ns, selector):
                    if (kind, ns, name) not in keep:
                        self._delete(kind, ns, name)

    def apply(self, rendered: RenderedRoute) -> None:
        """Backends, slices, policies and grant, then the route; then prune what it
        dropped."""
        backends = [*rendered.services, *rendered.endpoint_slices, *rendered.policies,
                    *rendered.grants]  # fmt: skip
        for obj in [*backends, rendered.route]:
            self._apply(obj)
        meta = rendered.route["metadata"]
        labels = meta["labels"]
        service, source_ns = labels[ISVC_LABEL], labels[NAMESPACE_LABEL]
        keep = {(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) for o in backends}
        self._prune({meta["namespace"], source_ns}, selector_of(service, source_ns), keep)

    def remove(self, namespace: str, name: str, source: tuple[str, str] | None = None) -> None:
        """The route first (traffic stops), then what it owned; `source` is the service's
        (namespace, name), by default the route's namespace and its name less `-global`."""
        self._delete("HTTPRoute", namespace, name)
        source_ns, service = source or (namespace, name.removesuffix("-global"))
        self._prune({namespace, source_ns}, selector_of(service, source_ns), set())


def from_kubeconfig(field_manager: str) -> KubernetesPublisher:
    """A publisher on the in-cluster config, or the local kubeconfig."""
    try:
        return KubernetesPublisher(kube_client.from_kubeconfig(), field_manager)
    except ImportError:
        raise PublishError(
            "publish.kubernetes needs the kubernetes extra: pip install 'gridroute[kubernetes]'"
        ) from None
