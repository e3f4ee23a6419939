"""Publishing one pass's maps, and what the publisher writes into their status.

`Publication` owns the publishers configured in control.yaml (directory, Kubernetes,
overlay) and turns each attempt into the map's publisher status: Published and
PublicationFallback, `published`, `gatewayRef`, `publisher` and
`observedTrafficMapGeneration` (moved only by a successful publish). It also holds an
invalid service's map (InvalidOwner, nothing withdrawn) and finalizes the maps of
services no longer routed (route first, then the map).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from gridroute.control.config import Loaded, ServiceConfig
from gridroute.control.publish_directory import DirectoryPublisher, PublishError
from gridroute.control.publish_kubernetes import KubernetesPublisher, from_kubeconfig
from gridroute.control.publish_overlay import Binding, OverlayPublisher
from gridroute.control.store import Store, StoreError, StoreUnavailable
from gridroute.control.workload_gateways import resolve
from gridroute.core.trafficmap_publication import (
    FAILED_LOG_LINE,
    PublishOutcome,
    publication_fallback,
    published,
)
from gridroute.wire.httproute import PlanRefused, RouteOptions, claimed_target, render
from gridroute.wire.trafficmap import (
    GatewayRef,
    Metadata,
    Publisher,
    Spec,
    TrafficMap,
    conditions,
    rfc3339,
)

log = logging.getLogger(__name__)

FINALIZER = "ome.io/trafficmap-publisher"

RoutePublisher = DirectoryPublisher | KubernetesPublisher


@dataclass(frozen=True, slots=True)
class ServiceResult:
    """What one pass did for one service (the CLI prints these)."""

    namespace: str
    name: str
    outcome: PublishOutcome
    weights: dict[str, int] = field(default_factory=dict)
    route: Path | None = None
    message: str = ""


def route_options(loaded: Loaded, svc: ServiceConfig) -> RouteOptions:
    pub = loaded.config.publish
    addresses = resolve(loaded) if pub.backend_type == "EndpointSlice" else None
    return RouteOptions(
        global_gateway=pub.global_gateway,
        backend_port=pub.backend_port,
        hostname=svc.global_host,
        host_template=pub.global_host_template,
        route_namespace=pub.route_namespace,
        rewrite_hostname=pub.rewrite_hostname,
        backend_tls=pub.backend_tls.enabled,
        ca_config_map=pub.backend_tls.ca_config_map,
        backend_type=pub.backend_type,
        backend_namespace=pub.backend_namespace,
        addresses=addresses.found if addresses else {},
        address_errors=addresses.errors if addresses else {},
    )


class Publication:
    """The publishers of one control.yaml; `loaded` is swapped on every reload."""

    def __init__(
        self,
        loaded: Loaded,
        clock: Callable[[], float],
        kubernetes: KubernetesPublisher | None = None,
    ) -> None:
        self.loaded = loaded
        self.clock = clock
        self._kubernetes = kubernetes
        self._bindings: dict[tuple[str, str], Binding] = {}
        """Each service's model and backends as last seen valid: a held (invalid)
        service keeps its capability in the overlay as it was."""

    def directory(self) -> DirectoryPublisher | None:
        d = self.loaded.config.publish.directory
        return None if d is None else DirectoryPublisher(self.loaded.path(d))

    def overlay(self) -> OverlayPublisher | None:
        o = self.loaded.config.publish.overlay
        return None if o is None else OverlayPublisher(self.loaded.path(o))

    def route_publishers(self) -> list[RoutePublisher]:
        """Directory and/or Kubernetes; a Kubernetes client is made on first use."""
        pubs: list[RoutePublisher] = []
        directory = self.directory()
        if directory is not None:
            pubs.append(directory)
        kube = self.loaded.config.publish.kubernetes
        if kube.enabled:
            if self._kubernetes is None:
                self._kubernetes = from_kubeconfig(kube.field_manager)
            pubs.append(self._kubernetes)
        return pubs

    def publisher_name(self) -> str:
        names = [p.name for p in (self.directory(), self.overlay()) if p is not None]
        if self.loaded.config.publish.kubernetes.enabled:
            names.insert(len(names) - (self.overlay() is not None), "kubernetes")
        return ",".join(names) or "none"

    def bindings(self) -> dict[tuple[str, str], Binding]:
        """The overlay binding of every valid service, over the ones remembered."""
        for svc in self.loaded.services:
            backends = {h.cluster: h.backend for h in svc.homes}
            self._bindings[(svc.namespace, svc.name)] = Binding(svc.model or svc.name, backends)
        return self._bindings

    def overlay_write(
        self, maps: list[TrafficMap], store: Store, held: set[tuple[str, str]]
    ) -> str | None:
        """Write the overlay from this pass's maps and the stored maps of `held` (invalid)
        services, which keep their last table; services being finalized are left out."""
        overlay = self.overlay()
        if overlay is None:
            return None
        kept = [m for m in store.maps() if (m.metadata.namespace, m.metadata.name) in held]
        try:
            overlay.write(maps + [m for m in kept if m.spec.entries], self.bindings())
        except PublishError as exc:
            log.error("%s: %s", FAILED_LOG_LINE, exc)
            return str(exc)
        return None

    def publish(
        self,
        svc: ServiceConfig,
        tm: TrafficMap,
        prior: TrafficMap | None,
        overlay_error: str | None,
        now: float,
    ) -> tuple[ServiceResult, TrafficMap]:
        opts = route_options(self.loaded, svc)
        status = tm.status
        outcome, message, route_path = PublishOutcome.PUBLISHED, "", None
        gateway_ref, claimed = status.gateway_ref, status.publisher
        observed = status.observed_traffic_map_generation
        weights = {e.cluster: e.weight for e in tm.spec.entries}
        try:
            pubs = self.route_publishers()
        except PublishError as exc:
            pubs, outcome, message = [], PublishOutcome.APPLY_FAILED, str(exc)
        if outcome is not PublishOutcome.PUBLISHED:
            pass
        elif not pubs and self.overlay() is None:
            outcome, message = PublishOutcome.WITHDRAWN, "no publisher is configured"
        elif pubs:
            try:
                rendered = render(tm, opts)
            except PlanRefused as refused:
                outcome, message = refused.outcome, str(refused)
                if outcome is PublishOutcome.WITHDRAWN and gateway_ref is not None:
                    try:
                        for pub in pubs:
                            pub.remove(
                                gateway_ref.namespace or svc.namespace,
                                gateway_ref.name,
                                (svc.namespace, svc.name),
                            )
                        gateway_ref, claimed = None, None
                    except PublishError as exc:
                        outcome, message = PublishOutcome.UNPUBLISH_FAILED, str(exc)
                elif outcome is PublishOutcome.WITHDRAWN:
                    gateway_ref, claimed = None, None
            else:
                meta = rendered.route["metadata"]
                try:
                    for pub in pubs:
                        pub.apply(rendered)
                except PublishError as exc:
                    outcome, message = PublishOutcome.APPLY_FAILED, str(exc)
                else:
                    directory = self.directory()
                    if directory is not None:
                        route_path = directory.path(meta["namespace"], meta["name"])
                    gateway_ref = GatewayRef(name=meta["name"], namespace=meta["namespace"])
                    claimed = Publisher(
                        publisher_name=self.publisher_name(),
                        claimed_targets=[claimed_target(meta["namespace"], meta["name"])],
                    )
        if outcome is PublishOutcome.PUBLISHED and overlay_error is not None:
            outcome, message = PublishOutcome.APPLY_FAILED, overlay_error
        if outcome is PublishOutcome.PUBLISHED:
            observed = tm.metadata.generation
        elif outcome not in (PublishOutcome.WITHDRAWN,):
            log.error("%s: services[%s]: %s", FAILED_LOG_LINE, svc.name, message)
        pub_conds = [published(outcome, self.publisher_name()), publication_fallback(outcome)]
        final = tm.model_copy(
            update={
                "metadata": tm.metadata.model_copy(
                    update={"finalizers": [FINALIZER] if gateway_ref is not None else None}
                ),
                "status": status.model_copy(
                    update={
                        "published": outcome is PublishOutcome.PUBLISHED,
                        "observed_traffic_map_generation": observed,
                        "gateway_ref": gateway_ref,
                        "publisher": claimed,
                        "conditions": conditions(
                            pub_conds, status.conditions, now, tm.metadata.generation
                        ),
                    }
                ),
            }
        )
        result = ServiceResult(svc.namespace, svc.name, outcome, weights, route_path, message)
        return result, final

    def hold(self, store: Store, namespace: str, name: str, message: str) -> ServiceResult:
        """An invalid service: keep its table, say InvalidOwner, leave its route alone.

        A service refused before it ever had a map gets none (OME creates no TrafficMap
        for a routing policy it refuses): the refusal is in the result and the pass's
        errors only. A stored map that cannot be read is replaced by an empty one."""
        now = self.clock()
        outcome = PublishOutcome.INVALID_OWNER
        try:
            prior = store.read_map(namespace, name)
        except StoreUnavailable:
            raise
        except StoreError:
            prior = TrafficMap(
                metadata=Metadata(name=name, namespace=namespace, creation_timestamp=rfc3339(now)),
                spec=Spec(service=name),
            )
        if prior is None:
            return ServiceResult(namespace, name, outcome, {}, None, message)
        pub_conds = [published(outcome, self.publisher_name()), publication_fallback(outcome)]
        status = prior.status.model_copy(
            update={
                "published": False,
                "conditions": conditions(
                    pub_conds, prior.status.conditions, now, prior.metadata.generation
                ),
            }
        )
        store.write_map(prior.model_copy(update={"status": status}))
        weights = {e.cluster: e.weight for e in prior.spec.entries}
        return ServiceResult(namespace, name, outcome, weights, None, message)

    def finalize(self, store: Store, keep: set[tuple[str, str]]) -> list[ServiceResult]:
        """Remove the route, then the map, of every service no longer routed (held ones,
        whose config or drains are invalid, are kept)."""
        out = []
        for tm in store.maps():
            key = (tm.metadata.namespace, tm.metadata.name)
            if key in keep:
                continue
            now = self.clock()
            finalizing = [
                published(PublishOutcome.FINALIZING, self.publisher_name()),
                publication_fallback(PublishOutcome.FINALIZING),
            ]
            status = tm.status.model_copy(
                update={
                    "published": False,
                    "conditions": conditions(
                        finalizing, tm.status.conditions, now, tm.metadata.generation
                    ),
                }
            )
            store.write_map(tm.model_copy(update={"status": status}))
            ref = tm.status.gateway_ref
            try:
                if ref is not None:
                    for pub in self.route_publishers():
                        pub.remove(ref.namespace or key[0], ref.name, key)
            except PublishError as exc:
                log.error("%s: %s", FAILED_LOG_LINE, exc)
                failed = [
                    published(PublishOutcome.UNPUBLISH_FAILED, self.publisher_name()),
                    publication_fallback(PublishOutcome.UNPUBLISH_FAILED),
                ]
                status = status.model_copy(
                    update={
                        "conditions": conditions(
                            failed, status.conditions, now, tm.metadata.generation
                        )
                    }
                )
                store.write_map(tm.model_copy(update={"status": status}))
                out.append(ServiceResult(*key, PublishOutcome.UNPUBLISH_FAILED, message=str(exc)))
                continue
            store.delete_map(*key)
            out.append(ServiceResult(*key, PublishOutcome.UNPUBLISHED))
        return out
